//! The dashboard's files, embedded in the binary: nothing is fetched from anywhere at run time.
//!
//! Plain HTML, CSS and JavaScript (no build step) in `assets/`: `index.html` is the page, `app.js`
//! draws it from the API, `app.css` styles it. The chart is uPlot (MIT, vendored unchanged with its
//! licence in `assets/vendor/`; version in `vendor/README.md`).

/// One embedded file, served at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// Where it is served (`/` for the page).
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// The page itself, served at `/`.
pub const INDEX: &Asset =
    &Asset { path: "/", content_type: "text/html; charset=utf-8", body: include_bytes!("assets/index.html") };

/// Every file under `/assets/`.
pub const ASSETS: &[Asset] = &[
    Asset {
        path: "/assets/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/app.js"),
    },
    Asset {
        path: "/assets/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/app.css"),
    },
    Asset {
        path: "/assets/vendor/uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/vendor/uPlot.iife.min.js"),
    },
    Asset {
        path: "/assets/vendor/uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/vendor/uPlot.min.css"),
    },
    Asset {
        path: "/assets/vendor/LICENSE-uPlot.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("assets/vendor/LICENSE-uPlot.txt"),
    },
];

/// The file served at `path`, if any.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// The page a browser gets when it is refused: what happened and what to do, nothing else.
pub fn refusal_page(reason: &str) -> String {
    let reason = reason.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentd: refused</title></head>\
         <body style=\"font-family: sans-serif; margin: 3em\"><h1 id=\"refused\">Refused</h1><p>{reason}</p>\
         <p>Run <code>agentd dashboard</code> and open the URL it prints.</p></body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_embedded_files() {
        let page = std::str::from_utf8(INDEX.body).unwrap();
        for src in page.split(['"', '\'']).filter(|s| s.starts_with("/assets/")) {
            assert!(find(src).is_some(), "index.html loads {src}, which is not embedded");
        }
        assert!(!page.contains("http://") && !page.contains("https://"), "nothing from the internet");
        let app = std::str::from_utf8(find("/assets/app.js").unwrap().body).unwrap();
        assert!(!app.contains("https://"), "nothing from the internet");
    }
}
