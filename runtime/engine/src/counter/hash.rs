//! Content keys: a 64-bit hash of each message, system prompt, tool definition and bare text, in
//! separate domains so that equal bytes in different roles never share a key.
//!
//! The counter's cache and the endpoint's table are keyed by these hashes, and the maps themselves
//! use `IdentityHasher` — hashing a hash again would only cost time.

use agentd_protocol::Message;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A map keyed by a content hash.
pub(super) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

pub(super) fn message_key(m: &Message) -> u64 {
    let mut h = FoldHasher::new(0);
    m.hash(&mut h);
    h.finish()
}

pub(super) fn system_key(system: &str) -> u64 {
    let mut h = FoldHasher::new(1);
    system.hash(&mut h);
    h.finish()
}

pub(super) fn tool_key(json: &str) -> u64 {
    let mut h = FoldHasher::new(2);
    json.hash(&mut h);
    h.finish()
}

/// A bare text, as the endpoint counted it.
pub(super) fn text_key(text: &str) -> u64 {
    let mut h = FoldHasher::new(3);
    text.hash(&mut h);
    h.finish()
}

/// A fast 64-bit content hash (folded 64×64→128 multiplication over 16-byte blocks, as in
/// wyhash/foldhash). Hashing a whole history must cost well under a millisecond per million
/// tokens, which SipHash does not manage. Not for adversarial keys: a collision would only misstate
/// one message's count.
///
/// Why hand-written rather than std's `DefaultHasher` or a crate: std's is SipHash (too slow, see
/// above), and FNV/Fx-style hashers go one byte or one word at a time with a serial dependency
/// between steps; this one takes 16 bytes per multiplication and, for long texts, four independent
/// lanes so the multiplications overlap. `foldhash` (in the lock file only through `hashbrown`) is
/// the same family; swapping it in would add a direct dependency and change every key, and it has
/// not been measured against this one with `bench_fitter`, so this one stays until it is.
struct FoldHasher {
    state: u64,
}

const K0: u64 = 0x2d35_8dcc_aa6c_78a5;
const K1: u64 = 0x8bb8_4b93_962e_acc9;
const K2: u64 = 0x4b33_a62e_d433_d4a3;

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl FoldHasher {
    fn new(domain: u64) -> FoldHasher {
        FoldHasher { state: fold_mul(domain ^ K0, K1) }
    }
}

/// The little-endian `u64` of an 8-byte slice (every caller slices exactly 8 bytes of a 16-byte block).
#[inline]
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

impl Hasher for FoldHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut s = self.state;
        let mut bytes_left = bytes;
        if bytes.len() >= 128 {
            // Four independent lanes, so the multiplications overlap instead of waiting on each other.
            let mut lanes = [s, s ^ K0, s ^ K1, s ^ K2];
            let mut stripes = bytes.chunks_exact(64);
            for stripe in &mut stripes {
                for (lane, block) in lanes.iter_mut().zip(stripe.chunks_exact(16)) {
                    let a = le_u64(&block[..8]);
                    let b = le_u64(&block[8..]);
                    *lane = fold_mul(a ^ *lane ^ K1, b ^ K2);
                }
            }
            s = fold_mul(lanes[0] ^ K1, lanes[1] ^ K2);
            s = fold_mul(s ^ lanes[2], lanes[3] ^ K0);
            bytes_left = stripes.remainder();
        }
        let mut blocks = bytes_left.chunks_exact(16);
        for block in &mut blocks {
            let a = le_u64(&block[..8]);
            let b = le_u64(&block[8..]);
            s = fold_mul(a ^ s ^ K1, b ^ K2);
        }
        // The tail, zero-padded, with the length so that padding cannot collide with real zeros.
        let tail = blocks.remainder();
        let mut buf = [0u8; 16];
        buf[..tail.len()].copy_from_slice(tail);
        let a = le_u64(&buf[..8]);
        let b = le_u64(&buf[8..]);
        self.state = fold_mul(a ^ s ^ K1, b ^ K2 ^ (bytes.len() as u64).wrapping_mul(K0));
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.state = fold_mul(self.state ^ K1, u64::from(i) ^ K2);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.state = fold_mul(self.state ^ K0 ^ i, K2);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold_mul(self.state ^ K2, K0)
    }
}

/// The cache's keys are hashes already.
#[derive(Default)]
pub(super) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
