//! What does the evidence archive cost? Figures, printed (this is a benchmark, not a test).
//!
//! ```text
//! cargo run --release --example bench_evidence
//! ```
//!
//! 1. Write throughput. `Store::put_evidence` (line scan + sha256 + blob written to a temporary file,
//!    fsynced, made read-only, renamed, directory fsynced + metadata and line index in one sled
//!    transaction, flushed) next to a plain write of the same bytes (create, write, fsync the file) and
//!    an atomic plain write (temporary file, write, fsync, rename, fsync the directory), for blobs of
//!    4 KB, 256 KB, 4 MB and 64 MB. Every write has distinct content, so dedup never short-circuits.
//! 2. Page reads from a 100 MB blob vs a 1 MB blob: a 64 KiB byte page and a 200-line page, both near
//!    the END of the blob. The first read of a blob in a process re-hashes it in full (integrity), which
//!    is O(blob) and reported separately; later reads only `stat` the file and read the page, which
//!    should cost the same for both blobs (O(page), not O(blob)).
//!
//! Files live in a temporary directory (under `$TMPDIR`, normally /tmp), removed at the end.
//! Sizes: KB/MB in the row labels are powers of two (KiB/MiB); throughput MB/s is 10^6 bytes/s.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_evidence::Store;
use agentd_protocol::evidence::{NewEvidence, Page, Source, Stored, Unit};
use common::{group, mb, median, ms, percentile, ratio, us, Rng};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;
/// (label, bytes, repetitions)
const WRITE_SIZES: &[(&str, usize, usize)] =
    &[("4 KB", 4 * KIB, 30), ("256 KB", 256 * KIB, 15), ("4 MB", 4 * MIB, 7), ("64 MB", 64 * MIB, 3)];
const BIG_BLOB: usize = 100_000_000;
const SMALL_BLOB: usize = 1_000_000;
const BYTE_PAGE: u64 = 64 * 1024;
const LINE_PAGE: u64 = 200;
const PAGE_READS: usize = 300;
const FIRST_READ_RUNS: usize = 3;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_evidence: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let started = Instant::now();
    let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let home = tmp.path();
    let store = Store::open(&home.join("db")).map_err(|e| format!("open store: {e}"))?;
    let fallback = home.join("fallback");
    let plain = home.join("plain");
    fs::create_dir_all(&plain).map_err(|e| e.to_string())?;
    println!("bench_evidence — store in {} (release build expected)", home.display());

    let t = Instant::now();
    let base = log_text(BIG_BLOB);
    println!("generated {:.0} MB of log-like text in {}", mb(base.len()), ms(t.elapsed()));
    println!();

    // Warm-up: creates the blob directory and sled's files, so the first measured write is not special.
    for i in 0..3 {
        let mut data = base[..8 * KIB].to_vec();
        stamp(&mut data, &format!("warm-up {i}"));
        put(&store, &data, &fallback)?;
    }

    // ------------------------------------------------------------------------------------------
    // 1. Write throughput
    println!("1. Write throughput, fsync included (median of the repetitions; MB/s = 10^6 B/s)");
    println!(
        "   {:>7} {:>5} | {:>12} {:>9} | {:>12} {:>9} | {:>12} {:>9} | {:>13} {:>13}",
        "blob",
        "reps",
        "evidence",
        "MB/s",
        "plain+fsync",
        "MB/s",
        "atomic plain",
        "MB/s",
        "evid / plain",
        "evid / atomic"
    );
    let mut serial = 0usize;
    for &(label, size, reps) in WRITE_SIZES {
        let (mut ev, mut pl, mut at) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            let mut data = base[..size].to_vec();
            stamp(&mut data, &format!("write {label} rep {rep}"));
            serial += 1;
            // Rotate the order, so that no writer always follows the same one.
            for k in 0..3 {
                match (rep + k) % 3 {
                    0 => {
                        let t = Instant::now();
                        put(&store, &data, &fallback)?;
                        ev.push(t.elapsed());
                    }
                    1 => {
                        let t = Instant::now();
                        plain_write(&plain.join(format!("p{serial}")), &data).map_err(|e| e.to_string())?;
                        pl.push(t.elapsed());
                    }
                    _ => {
                        let t = Instant::now();
                        atomic_write(&plain, &format!("a{serial}"), &data).map_err(|e| e.to_string())?;
                        at.push(t.elapsed());
                    }
                }
            }
        }
        let (e, p, a) = (median(&mut ev), median(&mut pl), median(&mut at));
        println!(
            "   {:>7} {:>5} | {:>12} {:>9.1} | {:>12} {:>9.1} | {:>12} {:>9.1} | {:>12.2}x {:>12.2}x",
            label,
            reps,
            ms(e),
            mb(size) / e.as_secs_f64(),
            ms(p),
            mb(size) / p.as_secs_f64(),
            ms(a),
            mb(size) / a.as_secs_f64(),
            ratio(e, p),
            ratio(e, a)
        );
    }
    println!("   evidence = put_evidence (scan lines + sha256 + atomic blob write + sled txn + flush)");
    println!("   plain+fsync = create, write_all, fsync file; atomic plain = tmp file, write, fsync, rename, fsync dir");
    println!("   ratio = evidence time / plain time (1.00x = same cost; higher = evidence slower)");
    println!();

    // ------------------------------------------------------------------------------------------
    // 2. Page reads: 100 MB vs 1 MB
    println!("2. Page reads near the END of a 100 MB blob vs a 1 MB blob");
    let mut big_data = base;
    stamp(&mut big_data, "big blob");
    let mut small_data = big_data[..SMALL_BLOB].to_vec();
    stamp(&mut small_data, "small blob");
    let t = Instant::now();
    let big = put(&store, &big_data, &fallback)?;
    let put_big = t.elapsed();
    let small = put(&store, &small_data, &fallback)?;
    let blob_path = |sha: &str| store.blob_path(sha).ok_or("bad sha".to_string());
    let (big_path, small_path) = (blob_path(&big.sha256)?, blob_path(&small.sha256)?);
    println!(
        "   blobs: {} ({} lines), {} ({} lines); the 100 MB put took {}",
        group(big.bytes),
        group(big.lines),
        group(small.bytes),
        group(small.lines),
        ms(put_big)
    );

    // Correctness spot checks: a byte page and a line page near the end match the source bytes.
    let probe = read(&store, &big.id, big.bytes - 3 * BYTE_PAGE, BYTE_PAGE, Unit::Bytes)?;
    let from = probe.offset as usize;
    if probe.data.as_bytes() != &big_data[from..from + probe.len as usize] {
        return Err("byte page does not match the blob".into());
    }
    let probe = read(&store, &big.id, big.lines - LINE_PAGE, LINE_PAGE, Unit::Lines)?;
    let tail: Vec<&[u8]> = big_data.split_inclusive(|&b| b == b'\n').rev().take(LINE_PAGE as usize).collect();
    let tail: Vec<u8> = tail.into_iter().rev().flatten().copied().collect();
    if probe.len != LINE_PAGE || probe.data.as_bytes() != tail.as_slice() {
        return Err("last line page does not match the blob".into());
    }

    // 2a. First read in a process: the blob is re-hashed in full once.
    println!();
    println!("   2a. First read of a blob in a process (full sha256 re-hash for integrity; median of {FIRST_READ_RUNS})");
    println!("       {:<44} {:>12} {:>12} {:>10}", "", "100 MB", "1 MB", "ratio");
    let first = |cold_cache: bool| -> Result<(Duration, Duration), String> {
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..FIRST_READ_RUNS {
            for (k, (meta, path)) in [(&big, &big_path), (&small, &small_path)].into_iter().enumerate() {
                store.forget_verified_blobs();
                if cold_cache {
                    drop_page_cache(path)?;
                }
                let t = Instant::now();
                read(&store, &meta.id, meta.bytes - BYTE_PAGE - 1000, BYTE_PAGE, Unit::Bytes)?;
                times[k].push(t.elapsed());
            }
        }
        Ok((median(&mut times[0]), median(&mut times[1])))
    };
    let (fb, fs_) = first(false)?;
    println!(
        "       {:<44} {:>12} {:>12} {:>9.1}x   ({:.0} MB/s hashed)",
        "page cache warm (CPU: sha256 of the blob)",
        ms(fb),
        ms(fs_),
        ratio(fb, fs_),
        mb(big.bytes as usize) / fb.as_secs_f64()
    );
    let fadvise_ok = drop_page_cache(&big_path).is_ok();
    if fadvise_ok {
        let (fb, fs_) = first(true)?;
        println!(
            "       {:<44} {:>12} {:>12} {:>9.1}x   ({:.0} MB/s hashed)",
            "page cache dropped (fadvise DONTNEED)",
            ms(fb),
            ms(fs_),
            ratio(fb, fs_),
            mb(big.bytes as usize) / fb.as_secs_f64()
        );
    }
    // Verified again for the steady state.
    read(&store, &big.id, 0, 1, Unit::Bytes)?;
    read(&store, &small.id, 0, 1, Unit::Bytes)?;

    // 2b. Steady state: the blob is verified (its file identity is remembered); a read stats it and
    // reads the page.
    println!();
    println!(
        "   2b. Steady-state page reads (blob already verified in this process; n={PAGE_READS} each, offsets"
    );
    println!("       drawn at random from the last 400 lines / last 576 KiB, the same rule for both blobs)");
    println!(
        "       {:<30} {:>12} {:>12} {:>12} {:>12} {:>11} {:>11}",
        "", "100MB med", "100MB p99", "1MB med", "1MB p99", "med ratio", "p99 ratio"
    );
    let mut rng = Rng(0x0bad_cafe_f00d_0001);
    let mut steady = |label: &str, unit: Unit, cold_cache: bool| -> Result<(), String> {
        let mut results = Vec::new();
        for (meta, path) in [(&big, &big_path), (&small, &small_path)] {
            let mut times = Vec::with_capacity(PAGE_READS);
            for _ in 0..PAGE_READS {
                let (offset, limit) = match unit {
                    Unit::Bytes => (meta.bytes - BYTE_PAGE - rng.below(512 * 1024), BYTE_PAGE),
                    Unit::Lines => (meta.lines - LINE_PAGE - rng.below(200), LINE_PAGE),
                };
                if cold_cache {
                    drop_page_cache(path)?;
                }
                let t = Instant::now();
                let page = read(&store, &meta.id, offset, limit, unit)?;
                times.push(t.elapsed());
                if page.len < limit {
                    return Err(format!("short page: {} of {limit}", page.len));
                }
            }
            let med = median(&mut times);
            let p99 = percentile(&mut times, 99.0);
            results.push((med, p99));
        }
        let ((bm, bp), (sm, sp)) = (results[0], results[1]);
        println!(
            "       {:<30} {:>12} {:>12} {:>12} {:>12} {:>10.2}x {:>10.2}x",
            label,
            us(bm),
            us(bp),
            us(sm),
            us(sp),
            ratio(bm, sm),
            ratio(bp, sp)
        );
        Ok(())
    };
    steady("64 KiB by bytes, near end", Unit::Bytes, false)?;
    steady("200 lines, near end", Unit::Lines, false)?;
    if fadvise_ok {
        steady("64 KiB by bytes, cache dropped", Unit::Bytes, true)?;
        steady("200 lines, cache dropped", Unit::Lines, true)?;
    }
    println!("       ratio = 100 MB blob time / 1 MB blob time (the blobs differ 100x in size;");
    println!("       ~1x means a page costs O(page), not O(blob))");
    println!();
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    drop(store);
    Ok(())
}

// ---------------------------------------------------------------------------------------------

fn put(
    store: &Store,
    data: &[u8],
    fallback: &Path,
) -> Result<agentd_protocol::evidence::EvidenceMeta, String> {
    let new = NewEvidence {
        data,
        media_type: "text/plain",
        source: Source {
            task_id: "bench-task".into(),
            role: "coder".into(),
            tool: "run_command".into(),
            call_id: Some("call_bench".into()),
            detail: Some("cargo test --workspace".into()),
        },
        complete: true,
        incomplete_reason: None,
        created_at: "2025-06-01T12:00:00.000Z",
    };
    match store.put_evidence(new, fallback).map_err(|e| format!("put_evidence: {e}"))? {
        Stored::InStore(meta) => Ok(meta),
        Stored::Fallback { path, .. } => {
            Err(format!("evidence went to the fallback file {}", path.display()))
        }
    }
}

fn read(store: &Store, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, String> {
    store.read_evidence(id, offset, limit, unit).map_err(|e| format!("read_evidence: {e}"))
}

fn plain_write(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = File::options().write(true).create_new(true).open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

fn atomic_write(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    plain_write(&tmp, data)?;
    fs::rename(&tmp, &path)?;
    File::open(dir)?.sync_all()?;
    Ok(path)
}

/// Asks the kernel to drop the file's (clean) pages from the page cache.
fn drop_page_cache(path: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    // SAFETY: a valid open descriptor; advice only.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("posix_fadvise: error {rc}"))
    }
}

/// Overwrites the start of `data` with a unique first line (same length), so its sha256 is new.
fn stamp(data: &mut [u8], tag: &str) {
    let line = format!("# {tag} {:?}", Instant::now());
    let n = line.len().min(data.len().saturating_sub(1));
    data[..n].copy_from_slice(&line.as_bytes()[..n]);
}

/// `bytes` bytes of log-like text (lines of 60–200 bytes), as a command's captured output.
fn log_text(bytes: usize) -> Vec<u8> {
    const LEVELS: &[&str] = &["INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"];
    const TARGETS: &[&str] =
        &["reservation", "store::pg", "api::orders", "worker::queue", "cache", "metrics"];
    const MSGS: &[&str] = &[
        "reserved stock for order",
        "released expired hold",
        "retrying after serialization failure",
        "request completed",
        "cache miss, loading from database",
        "lease renewed",
        "conflict on version, re-reading row",
    ];
    let mut rng = Rng(0x5eed_0000_e71d_e7ce);
    let mut out = String::with_capacity(bytes + 256);
    let mut n = 0u64;
    while out.len() < bytes {
        n += 1;
        let r = rng.next();
        let _ = write!(
            out,
            "2025-06-01T{:02}:{:02}:{:02}.{:06}Z {} inventory::{}: {} sku=SKU-{:05} qty={} order=ord-{:010} latency_us={}",
            (n / 3_600_000) % 24,
            (n / 60_000) % 60,
            (n / 1000) % 60,
            r % 1_000_000,
            LEVELS[(r >> 20) as usize % LEVELS.len()],
            TARGETS[(r >> 24) as usize % TARGETS.len()],
            MSGS[(r >> 28) as usize % MSGS.len()],
            (r >> 32) % 100_000,
            1 + (r >> 40) % 50,
            n,
            (r >> 44) % 20_000,
        );
        if r.is_multiple_of(7) {
            let _ = write!(out, " detail=\"{}\"", "x".repeat(((r >> 50) % 90) as usize));
        }
        out.push('\n');
    }
    let mut v = out.into_bytes();
    v.truncate(bytes);
    if let Some(last) = v.last_mut() {
        *last = b'\n';
    }
    v
}
