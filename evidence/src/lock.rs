//! Taking a mutex that a panicking thread may have poisoned.
//!
//! A `std::sync::Mutex` is poisoned when a thread panics while it holds the guard, and every later
//! `lock()` then returns an error. Refusing every later caller would turn one panic into a dead
//! store, and nothing here needs that: every critical section in this crate leaves its data
//! consistent at each step (sequence counters advance only after a successful write, the record of
//! verified blobs only ever holds fingerprints of files that hashed correctly, the health record is
//! replaced whole). So [`lock`] takes the data behind a poisoned mutex as it is.
//!
//! This module sits below every other one of the crate (it uses nothing of it), so any of them may
//! lock without importing a module that imports it back.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex, recovering from poisoning (see the module's doc for why that is sound here).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
