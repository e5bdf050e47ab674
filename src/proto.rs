//! Code generated from `proto/` (our own definitions, written from the protocol fact sheet).
//!
//! The three legacy files have no package, so their types live at this module's root; the `v1`
//! files live in [`v1`]. The generated legacy code refers to `v1::…`, which resolves to the
//! sibling module below.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/_.rs"));

/// Package `v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

/// The encoded `FileDescriptorSet` of every compiled file, for reflection in tests and tools.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/hatchet_descriptor.bin"));
