//! The integration test suite: one binary, one module per area (one binary links faster than many).

// Features on both engines (the real one too, with HATCHET_REAL_ENGINE=1).
mod conformance;
// Features, faults and the public surface, on our engine.
mod faults;
mod features;
mod surface;

mod support;
