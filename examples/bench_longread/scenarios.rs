//! What is run: four shapes of documents (how many, how large, in which window), each in both
//! counting modes (agentd's estimate, or the server's `/tokenize`) and each without and with the
//! provider's prompt cache declared.

/// The documents' shape: how many, how large, in which window.
pub struct Shape {
    files: usize,
    file_tokens: u64,
    window: u64,
}

impl Shape {
    /// A document's size as a share of the window, in percent.
    fn percent(&self) -> f64 {
        100.0 * self.file_tokens as f64 / self.window as f64
    }
}

/// Documents at 2 %, 5 %, 9 % and 14 % of the window, each about 80–110k tokens in all.
pub const SHAPES: [Shape; 4] = [
    Shape { files: 60, file_tokens: 1_300, window: 65_536 },
    Shape { files: 50, file_tokens: 1_640, window: 32_768 },
    Shape { files: 30, file_tokens: 3_000, window: 32_768 },
    Shape { files: 12, file_tokens: 9_000, window: 65_536 },
];

/// How the provider's prompt cache is known in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    /// `cache = false`: none, today's rule (as many recent rounds as fit).
    None,
    /// Learned from the server's usage reports (its cached tokens), nothing declared.
    Learned,
    /// Declared (`cache = { read_factor, min_tokens }`) as the scripted server runs it.
    Declared,
}

impl Cache {
    /// Its word in a scenario's name.
    pub fn word(self) -> &'static str {
        match self {
            Cache::None => "none",
            Cache::Learned => "learned",
            Cache::Declared => "declared",
        }
    }
}

/// One run: a shape, a counting mode, and how the provider's prompt cache is known (declared or
/// learned, the compaction then prices where it lands; none: as many recent rounds as fit).
pub struct Scenario {
    pub name: String,
    pub files: usize,
    pub file_tokens: u64,
    pub window: u64,
    pub endpoint: bool,
    pub cache: Cache,
}

/// Every shape in both counting modes, each with the cache none, learned and declared.
pub fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for shape in &SHAPES {
        for endpoint in [false, true] {
            for cache in [Cache::None, Cache::Learned, Cache::Declared] {
                out.push(Scenario {
                    name: format!(
                        "{:>4.1}% {}×{} @{}K, {}, {}",
                        shape.percent(),
                        shape.files,
                        shape.file_tokens / 100 * 100,
                        shape.window / 1024,
                        if endpoint { "/tokenize" } else { "estimate" },
                        cache.word()
                    ),
                    files: shape.files,
                    file_tokens: shape.file_tokens,
                    window: shape.window,
                    endpoint,
                    cache,
                });
            }
        }
    }
    out
}
