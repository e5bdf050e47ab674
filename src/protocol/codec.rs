//! The codec of every generated client and server: prost's encoding, with the per-call buffers
//! sized for this protocol's messages.
//!
//! tonic starts each call's encoder and decoder with an 8 KiB buffer. That is two 8 KiB
//! allocations per unary call, above glibc's per-thread cache (1,032 B): each one takes the
//! arena's lock and, when small chunks are free, consolidates them first. Nearly every message
//! of this protocol fits in [`CALL_BUFFER_BYTES`] (a step event, an assignment, a trigger, a
//! version); a larger one grows its buffer as it would from the default (`BytesMut` grows by
//! doubling), so nothing is limited by it.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// The first buffer of each call's encoder and decoder.
pub const CALL_BUFFER_BYTES: usize = 1024;

/// How much an encoder gathers before it yields a stream's messages (tonic's default).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// The buffer settings of every generated client and server.
pub fn buffer_settings() -> BufferSettings {
    BufferSettings::new(CALL_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

/// prost's codec with [`buffer_settings`] (named in `build.rs` as the generated code's codec).
#[derive(Debug, Clone)]
pub struct WireCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for WireCodec<T, U> {
    fn default() -> Self {
        WireCodec(PhantomData)
    }
}

impl<T, U> Codec for WireCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(buffer_settings())
    }
}
