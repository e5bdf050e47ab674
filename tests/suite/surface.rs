//! The public surface: the API list and what it may name, the configuration a user gives, bad
//! input from every side, every `# Cancel safety` claim, and the house's hygiene.

mod bad_input;
mod cancel_safety;
mod config_env;
mod hygiene;
mod public_api;
