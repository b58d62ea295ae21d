//! A real browser for the dashboard's tests: Debian's headless Chromium driven through
//! `chromedriver`'s W3C WebDriver HTTP API, with the workspace's own `reqwest` (no WebDriver crate).
//!
//! [`Browser::start`] answers `Ok(None)` when `/usr/bin/chromium` or `/usr/bin/chromedriver` is not
//! installed (a test then says it is skipped; see [`skip_or_fail`]), and an error when they are
//! there but do not start. Everything runs on 127.0.0.1; the browser gets a fresh profile, no proxy,
//! no network services of its own (no sync, updates or component downloads).
//!
//! A [`Browser`] stops what it started when it is dropped (a failing test's too): it ends the
//! WebDriver session (`DELETE /session/{id}`, which quits Chromium), kills chromedriver's process
//! group (chromedriver runs in one of its own, with the browser it starts), kills whatever process
//! still names the profile directory, and removes that directory.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's packages put the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's `chromium-driver`.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The W3C key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The prefix of every browser profile directory (under the temporary directory): what a check
/// for browsers left running looks for (`.ci/run` does).
pub const PROFILE_PREFIX: &str = "agentd-chromium";

/// A chromedriver process and one browser session of it, ended (and the driver killed) on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    base: String,
    session: String,
    http: reqwest::Client,
    profile: tempfile::TempDir,
    /// The driver's log, for a failure message.
    pub log: PathBuf,
}

/// When the browser is missing: what a test prints before it returns (so it is reported as
/// skipped, never as passed) — unless `AGENTD_REQUIRE_BROWSER` is set (CI, after installing it),
/// where a missing browser fails the test.
pub fn skip_or_fail(test: &str) {
    let why = format!(
        "SKIPPED: {test}: no {CHROMIUM} or {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
    );
    if std::env::var_os("AGENTD_REQUIRE_BROWSER").is_some() {
        panic!("{why}, and AGENTD_REQUIRE_BROWSER is set");
    }
    eprintln!("{why}");
    println!("{why}");
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session, or `Ok(None)` when they are not installed.
    pub async fn start() -> Result<Option<Browser>, String> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            return Ok(None);
        }
        let profile = tempfile::Builder::new().prefix(PROFILE_PREFIX).tempdir().map_err(|e| e.to_string())?;
        let log = profile.path().join("chromedriver.log");
        let port = free_port().map_err(|e| format!("no free port for chromedriver: {e}"))?;
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A process group of its own, which the browser it starts joins: killed as one on drop.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {CHROMEDRIVER}: {e}"))?;
        let http = crate::http_client().no_proxy().build().map_err(|e| e.to_string())?;
        let base = format!("http://127.0.0.1:{port}");
        let mut browser =
            Browser { driver, port, base, session: String::new(), http, profile, log: log.clone() };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = browser.http.get(format!("{}/status", browser.base)).send().await;
            if let Ok(r) = ready {
                let status: Value = r.json().await.unwrap_or(Value::Null);
                if status["value"]["ready"] == true {
                    break;
                }
            }
            if let Ok(Some(status)) = browser.driver.try_wait() {
                return Err(format!(
                    "{CHROMEDRIVER} exited at start ({status}); its log: {}",
                    browser.driver_log()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{CHROMEDRIVER} did not answer within 30s; its log: {}",
                    browser.driver_log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let data_dir = browser.profile.path().join("profile");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--no-proxy-server".into(),
            "--window-size=1440,1000".into(),
            format!("--user-data-dir={}", data_dir.display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}
        }}});
        let created = browser.raw("POST", "/session", Some(capabilities)).await?;
        browser.session = created["sessionId"]
            .as_str()
            .ok_or_else(|| {
                format!("no session from chromedriver: {created}; its log: {}", browser.driver_log())
            })?
            .to_string();
        Ok(Some(browser))
    }

    /// The browser's profile directory (under [`PROFILE_PREFIX`]), removed on drop.
    pub fn profile(&self) -> &Path {
        self.profile.path()
    }

    fn driver_log(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// One WebDriver command: its `value`, or the driver's error in words.
    async fn raw(&self, verb: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let request = match verb {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let response = request.send().await.map_err(|e| format!("{verb} {path}: {e}"))?;
        let answer: Value = response.json().await.map_err(|e| format!("{verb} {path}: {e}"))?;
        let value = answer.get("value").cloned().unwrap_or(answer);
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            return Err(format!("{verb} {path}: {error}: {}", value["message"].as_str().unwrap_or("")));
        }
        Ok(value)
    }

    async fn command(&self, verb: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        match self.raw(verb, &path, body).await {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    /// Opens `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// The address the browser shows.
    pub async fn url(&self) -> String {
        self.command("GET", "/url", None).await.as_str().unwrap_or_default().to_string()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and answers its value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.command("POST", "/execute/sync", Some(json!({"script": script, "args": args}))).await
    }

    /// Runs an async script: the function body calls `arguments[arguments.length - 1](value)`.
    pub async fn js_async(&self, script: &str, args: Value) -> Value {
        self.command("POST", "/execute/async", Some(json!({"script": script, "args": args}))).await
    }

    /// Evaluates `expression` in the page until it is truthy, and answers its value; panics after
    /// `timeout` with what it was last and the page's text.
    pub async fn wait_for(&self, expression: &str, timeout: Duration) -> Value {
        let script = format!("try {{ return ({expression}); }} catch (e) {{ return null; }}");
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.js(&script, json!([])).await;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let text = self.js("return document.body ? document.body.innerText : ''", json!([])).await;
                panic!(
                    "waited {timeout:?} for `{expression}` (last: {v}); the page says:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first element `css` selects (a WebDriver reference).
    pub async fn find(&self, css: &str) -> String {
        let v = self.command("POST", "/element", Some(json!({"using": "css selector", "value": css}))).await;
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {v}")).to_string()
    }

    /// Clicks the first element `css` selects, as a user's click. A page that redraws the element
    /// between finding and clicking it (a live page does) is asked again.
    pub async fn click(&self, css: &str) {
        for _ in 0..50 {
            let id = self.find(css).await;
            let path = format!("/session/{}/element/{id}/click", self.session);
            match self.raw("POST", &path, Some(json!({}))).await {
                Ok(_) => return,
                Err(e) if e.contains("stale element") => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{css} kept being redrawn before it could be clicked");
    }

    /// Types `text` into the first element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.command("POST", &format!("/element/{id}/clear"), Some(json!({}))).await;
        self.command("POST", &format!("/element/{id}/value"), Some(json!({"text": text}))).await;
    }

    /// The visible text of the first element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        let id = self.find(css).await;
        self.command("GET", &format!("/element/{id}/text"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The browser's cookies for the page, as WebDriver describes them (`name`, `value`, `httpOnly`…).
    pub async fn cookies(&self) -> Vec<Value> {
        self.command("GET", "/cookie", None).await.as_array().cloned().unwrap_or_default()
    }

    /// Resizes the browser's window (CSS pixels).
    pub async fn resize(&self, width: u32, height: u32) {
        self.command("POST", "/window/rect", Some(json!({"width": width, "height": height}))).await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let v = self.command("GET", "/screenshot", None).await;
        decode_base64(v.as_str().unwrap_or_default()).unwrap_or_else(|e| panic!("screenshot: {e}"))
    }
}

impl Browser {
    /// `DELETE /session/{id}`: chromedriver quits the browser. A plain blocking request, since
    /// `drop` cannot await; bounded, as a driver that hangs must not hang the test.
    fn end_session(&self) -> Result<String, String> {
        if self.session.is_empty() {
            return Ok(String::new());
        }
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream =
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.session, self.port
        );
        stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        Ok(answer)
    }
}

/// The processes (other than this one) whose command line contains `needle`.
pub fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The session first: chromedriver quits the browser it started.
        if let Err(e) = self.end_session() {
            eprintln!("ending the WebDriver session {}: {e}", self.session);
        }
        // Then the driver's process group: the driver, and any browser process still in it.
        let group = self.driver.id() as i32;
        // SAFETY: signalling the process group of a child this struct started in a group of its own.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.driver.wait();
        // A browser process that left the group still names its profile: killed too, then waited
        // for (a dying browser may write to its profile) before the profile is removed.
        let profile = self.profile.path().display().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = processes_naming(&profile);
            if left.is_empty() || Instant::now() > deadline {
                if !left.is_empty() {
                    eprintln!("browser processes {left:?} outlived their session and a SIGKILL");
                }
                break;
            }
            for pid in left {
                // SAFETY: signalling a process whose command line names this browser's own profile.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Err(e) = std::fs::remove_dir_all(self.profile.path()) {
            eprintln!("removing the browser profile {profile}: {e}");
        }
    }
}

/// Standard base64 (with or without padding) to bytes.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return Err("truncated base64".into()),
        };
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
        assert!(decode_base64("a$==").is_err());
    }
}
