//! TLS settings as the official SDKs define them (`none`, `tls`, `mtls`).

use std::path::PathBuf;

use super::ConfigError;

/// How the runtime secures its connections to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TlsStrategy {
    /// Plaintext HTTP/2 (h2c); for the development engine and local deployments.
    None,
    /// TLS, verifying the server against the web PKI roots or a given CA. The SDK default.
    #[default]
    Tls,
    /// Mutual TLS: as `Tls`, plus a client certificate and key.
    Mtls,
}

impl TlsStrategy {
    /// Parses the value of `HATCHET_CLIENT_TLS_STRATEGY` (case-insensitive).
    pub fn parse(var: &'static str, value: &str) -> Result<Self, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(TlsStrategy::None),
            "tls" => Ok(TlsStrategy::Tls),
            "mtls" => Ok(TlsStrategy::Mtls),
            _ => Err(ConfigError::UnknownTlsStrategy {
                var,
                value: value.to_string(),
            }),
        }
    }

    /// The URI scheme the gRPC endpoint uses.
    pub fn scheme(self) -> &'static str {
        match self {
            TlsStrategy::None => "http",
            TlsStrategy::Tls | TlsStrategy::Mtls => "https",
        }
    }
}

/// TLS material and names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsSettings {
    /// The strategy.
    pub strategy: TlsStrategy,
    /// Client certificate (PEM), for `mtls`.
    pub cert_file: Option<PathBuf>,
    /// Client private key (PEM), for `mtls`.
    pub key_file: Option<PathBuf>,
    /// A CA bundle (PEM) to verify the server with, instead of the web PKI roots.
    pub root_ca_file: Option<PathBuf>,
    /// The name to verify the server certificate against (and send as SNI).
    pub server_name: String,
    /// Whether `server_name` was given (`HATCHET_CLIENT_TLS_SERVER_NAME`): the REST path then
    /// verifies the API's certificate against it too; otherwise against its URL's host.
    pub(crate) server_name_given: bool,
}

impl TlsSettings {
    /// Checks that `mtls` has its certificate and key.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.strategy == TlsStrategy::Mtls {
            if self.cert_file.is_none() {
                return Err(ConfigError::MissingTlsFile {
                    var: super::vars::TLS_CERT_FILE,
                    what: "certificate",
                });
            }
            if self.key_file.is_none() {
                return Err(ConfigError::MissingTlsFile {
                    var: super::vars::TLS_KEY_FILE,
                    what: "private key",
                });
            }
        }
        Ok(())
    }
}
