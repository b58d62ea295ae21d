//! The benchmarks' workspace of 10,000 files and about 200 MB (8,000 small text files of 1–7 KB,
//! 1,900 of 20–60 KB, 100 of 0.5–1.3 MB, in 100 directories of 10 subdirectories), the same every
//! run, with a build output its `.gitignore` leaves out.

use super::Rng;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// (how many files, smallest, largest) in bytes.
const SIZES: [(usize, usize, usize); 3] =
    [(8_000, 1_000, 7_000), (1_900, 20_000, 60_000), (100, 500_000, 1_340_000)];
/// Top directories.
pub const DIRS: usize = 100;
/// Subdirectories of each.
pub const SUBDIRS: usize = 10;

/// Writes the workspace (the same every run): the files and their total bytes.
pub fn build_workspace(ws: &Path) -> Result<(usize, usize), String> {
    let mut rng = Rng(0x5eed);
    let mut sizes: Vec<usize> = Vec::new();
    for (count, low, high) in SIZES {
        sizes.extend((0..count).map(|_| low + rng.below((high - low) as u64) as usize));
    }
    // Mixed: the sizes spread over the directories.
    for i in (1..sizes.len()).rev() {
        sizes.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let per_dir = sizes.len() / (DIRS * SUBDIRS);
    let mut total = 0;
    fs::create_dir_all(ws).map_err(|e| e.to_string())?;
    fs::write(ws.join(".gitignore"), "target/\n").map_err(|e| e.to_string())?;
    for (n, size) in sizes.iter().enumerate() {
        let dir = ws.join(format!("d{:02}/s{}", n / (per_dir * SUBDIRS), (n / per_dir) % SUBDIRS));
        if n % per_dir == 0 {
            fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        }
        let text = text_of(&mut rng, *size);
        total += text.len();
        fs::write(dir.join(format!("f{}.rs", n % per_dir)), text).map_err(|e| e.to_string())?;
    }
    // A build output the copies leave out.
    fs::create_dir_all(ws.join("target")).map_err(|e| e.to_string())?;
    fs::write(ws.join("target/out.bin"), vec![0u8; 1 << 20]).map_err(|e| e.to_string())?;
    Ok((sizes.len() + 1, total + ".gitignore\n".len()))
}

/// About `size` bytes of source-like lines.
pub fn text_of(rng: &mut Rng, size: usize) -> String {
    let words = ["let", "value", "index", "count", "total", "result", "buffer", "state", "item", "next"];
    let mut text = String::with_capacity(size + 80);
    let mut line = 0;
    while text.len() < size {
        line += 1;
        let _ = writeln!(
            text,
            "    let {}_{line} = {}({}, {});",
            rng.pick(&words),
            rng.pick(&words),
            rng.next() % 100_000,
            rng.pick(&words)
        );
    }
    text
}
