//! Configuration errors: each names the variable (or builder field) at fault and what to do.

/// A configuration problem found while building a [`super::ClientConfig`].
///
/// Every variant names the environment variable it concerns (the builder uses the same names, so
/// one message fits both paths). No variant ever holds the token itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No token was given.
    #[error(
        "{var} is not set: give the API token of your tenant (create one in the Hatchet dashboard, or take it from the development engine)"
    )]
    MissingToken {
        /// The variable.
        var: &'static str,
    },
    /// The token is not a JWT the SDK can read.
    #[error("{var} is not a valid Hatchet token: {reason}")]
    MalformedToken {
        /// The variable.
        var: &'static str,
        /// Why (never includes the token).
        reason: String,
    },
    /// The token lacks a claim and no variable overrides it.
    #[error(
        "the token in {var} has no `{claim}` claim; set {override_var} or use a token issued by the engine"
    )]
    MissingClaim {
        /// The token variable.
        var: &'static str,
        /// The claim.
        claim: &'static str,
        /// The variable that would supply the value instead.
        override_var: &'static str,
    },
    /// A gRPC address is not `host:port`.
    #[error("{var} = {value:?} is not a valid host:port address: {reason}")]
    InvalidAddress {
        /// Where the value came from (a variable, or the token claim).
        var: &'static str,
        /// The value given.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A REST base URL is not an absolute http(s) URL.
    #[error("{var} = {value:?} is not a valid http(s) URL: {reason}")]
    InvalidUrl {
        /// Where the value came from.
        var: &'static str,
        /// The value given.
        value: String,
        /// Why.
        reason: String,
    },
    /// The TLS strategy is not one of `none`, `tls`, `mtls`.
    #[error("{var} = {value:?} is not a TLS strategy: use none, tls or mtls")]
    UnknownTlsStrategy {
        /// The variable.
        var: &'static str,
        /// The value given.
        value: String,
    },
    /// mTLS needs a client certificate and key.
    #[error(
        "{var} is required when HATCHET_CLIENT_TLS_STRATEGY=mtls: give the path of the client {what}"
    )]
    MissingTlsFile {
        /// The missing variable.
        var: &'static str,
        /// `certificate` or `private key`.
        what: &'static str,
    },
    /// A port variable has a value that is not a port number.
    #[error("{var} = {value:?} is not a port number: use 1 to 65535 (or 0 for any free port)")]
    InvalidPort {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A size variable has a value that is not a byte count.
    #[error(
        "{var} = {value:?} is not a message size: use a whole number of bytes, 1024 or more (4194304 is the engine's default)"
    )]
    InvalidSize {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A boolean variable has a value that is neither true nor false.
    #[error("{var} = {value:?} is not a boolean: use true or false")]
    InvalidBool {
        /// The variable.
        var: &'static str,
        /// The value given.
        value: String,
    },
    /// A file named by a variable could not be read.
    #[error("{var}: cannot read {path}: {reason}")]
    UnreadableFile {
        /// The variable.
        var: &'static str,
        /// The path.
        path: String,
        /// The I/O error text.
        reason: String,
    },
}
