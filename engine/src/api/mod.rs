//! The transports: the gRPC services behind their gate, the REST API, the dashboard, and the
//! connections and streams they serve on. They read and change the engine through `Engine`.

pub mod clients;
pub mod dashboard;
pub(crate) mod gate;
pub(crate) mod grpc;
pub(crate) mod io;
pub(crate) mod rest;
pub(crate) mod streams;
