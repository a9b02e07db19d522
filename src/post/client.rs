//! A blocking client for OpenAI-compatible `POST {base}/v1/chat/completions` endpoints,
//! built to survive a night of calls to a flaky server.
//!
//! - Every call has a global timeout (connect, send, wait, read).
//! - 429, 408 and 5xx replies, timeouts, connection errors and 200 replies whose body is
//!   not a chat completion are retried up to `max_retries` times, waiting
//!   `min(backoff_max, backoff_base · 2^attempt)` scaled by a random factor in [0.5, 1)
//!   (jitter, so that workers do not retry in lockstep) — or, when the server sends
//!   `Retry-After: <seconds>`, that long (capped at [`RETRY_AFTER_CAP`]).
//! - Other 4xx replies (bad key, unknown model) fail at once: retrying cannot help.
//! - Once the `stop` flag is set (Ctrl-C) no request starts, a request in flight is
//!   abandoned (its thread is left to the timeout; its reply is dropped) and waits
//!   between retries end: the call fails as interrupted within ≈ 50 ms, so a graceful
//!   stop never waits out a hung endpoint or a long `Retry-After`.
//! - Successful replies are stored in the [`ResponseCache`] when one is configured, and
//!   served from it without a request afterwards.
//!
//! Concurrency is bounded by the caller: each worker thread makes one call at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

use super::cache::{self, Entry, ResponseCache};
use super::{Llm, LlmError, Reply, Usage};

/// Longest `Retry-After` honoured; a longer one waits this long.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(600);

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
    pub endpoint: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    pub temperature: f32,
    pub max_tokens: u32,
    pub timeout: Duration,
    pub max_retries: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// When set (Ctrl-C), no request starts, one in flight is abandoned, waits
    /// between retries end, and the call fails as interrupted.
    pub stop: Option<&'static AtomicBool>,
}

/// The reason of a call cut short by the stop flag.
pub const INTERRUPTED_REASON: &str = "interrupted (Ctrl-C)";

/// Sleeps `wait`, in slices of at most 50 ms, until `stop` is set; returns whether the
/// whole wait elapsed.
fn wait_unless_stopped(wait: Duration, stop: Option<&AtomicBool>) -> bool {
    let until = Instant::now() + wait;
    loop {
        if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

/// The request body (field order fixed, so equal requests hash equally).
#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    temperature: f32,
    max_tokens: u32,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

/// How one attempt ended.
enum Attempt {
    Done(String, Usage),
    /// Worth another try; the server's `Retry-After` when it sent one.
    Retry(String, Option<Duration>),
    Fatal(String),
}

/// Where requests go: the agent (with its timeout), the URL and the key.
#[derive(Clone)]
struct Endpoint {
    agent: ureq::Agent,
    url: String,
    api_key: Option<String>,
}

/// The HTTP client with its cache.
pub struct ChatClient {
    endpoint: Endpoint,
    config: ClientConfig,
    cache: Option<ResponseCache>,
}

impl ChatClient {
    pub fn new(config: ClientConfig, cache: Option<ResponseCache>) -> Result<Self> {
        let base = config.endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!(
                "--endpoint {base}: expected an http:// or https:// base URL, e.g. http://127.0.0.1:8000"
            );
        }
        // Parsed here, so that a malformed URL (`http://[::1`, a space in the host, port
        // 99999) is refused at the start instead of retried for every question.
        let uri: Option<ureq::http::Uri> = base.parse().ok();
        // (`Uri` takes any digits after the colon; its port is then just absent.)
        let port_ok = uri.as_ref().and_then(|u| u.authority()).is_some_and(|a| {
            let host_port = a.as_str().rsplit('@').next().unwrap_or("");
            let after_host = host_port.rsplit_once(']').map_or(host_port, |(_, p)| p);
            after_host
                .rsplit_once(':')
                .is_none_or(|(_, p)| p.parse::<u16>().is_ok_and(|n| n > 0))
        });
        if !port_ok
            || uri
                .as_ref()
                .and_then(|u| u.host())
                .is_none_or(str::is_empty)
        {
            bail!(
                "--endpoint {base}: not a valid URL (check the host, the brackets of an IPv6 \
                 address and the port, 1–65535), e.g. http://127.0.0.1:8000"
            );
        }
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Self {
            endpoint: Endpoint {
                agent,
                url: format!("{base}/v1/chat/completions"),
                api_key: config.api_key.clone(),
            },
            config,
            cache,
        })
    }

    /// One attempt, or `None` when the stop flag was set before it started or while
    /// it was in flight (the request then runs on, detached, until its timeout).
    fn attempt_unless_stopped(&self, body: &str) -> Option<Attempt> {
        let Some(stop) = self.config.stop else {
            return Some(self.endpoint.attempt(body));
        };
        let stopped = || stop.load(Ordering::SeqCst);
        if stopped() {
            return None;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (endpoint, body) = (self.endpoint.clone(), body.to_string());
        std::thread::spawn(move || {
            let _ = tx.send(endpoint.attempt(&body));
        });
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(attempt) => return Some(attempt),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stopped() => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Some(Attempt::Retry("the request thread ended".into(), None))
                }
            }
        }
    }
}

impl Endpoint {
    fn attempt(&self, body: &str) -> Attempt {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = match request.send(body) {
            Ok(r) => r,
            Err(e) => return Attempt::Retry(format!("request failed: {e}"), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let text = match response.body_mut().read_to_string() {
            Ok(t) => t,
            Err(e) => return Attempt::Retry(format!("HTTP {status}, body unreadable: {e}"), None),
        };
        let excerpt = || text.chars().take(200).collect::<String>();
        match status {
            200..=299 => match completion(&text) {
                Some((reply, usage)) => Attempt::Done(reply, usage),
                None => Attempt::Retry(
                    format!(
                        "HTTP {status} with a body that is not a chat completion: {:?}",
                        excerpt()
                    ),
                    None,
                ),
            },
            408 | 429 | 500..=599 => {
                Attempt::Retry(format!("HTTP {status}: {:?}", excerpt()), retry_after)
            }
            _ => Attempt::Fatal(format!(
                "HTTP {status} from {}: {:?} ({})",
                self.url,
                excerpt(),
                match status {
                    400 | 413 | 422 =>
                        "the server refused the request as it is: a prompt \
                        longer than the model's context, or --max-tokens past it, is the \
                        usual cause",
                    401 | 403 => "check the API key (--api-key-env names its variable)",
                    404 =>
                        "check --endpoint (its base URL, without /v1/chat/completions) \
                        and --llm-model",
                    _ => "check --endpoint, --llm-model and the API key",
                }
            )),
        }
    }
}

impl ChatClient {
    /// The wait before retry number `attempt` (0-based) without a `Retry-After`.
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .config
            .backoff_base
            .saturating_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX));
        exp.min(self.config.backoff_max)
            .mul_f64(0.5 + 0.5 * fastrand::f64())
    }
}

/// Says that a call is retried, at most once per [`RETRY_LOG_EVERY`] for the whole
/// process (calls run in parallel): a down or slow server is not a silent wait.
fn log_retry(why: &str, wait: Duration, retry: u32, max: u32) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|t| t.elapsed() >= RETRY_LOG_EVERY) {
        *last = Some(std::time::Instant::now());
        log::warn!(
            "LLM call: {why}; retry {retry} of {max} in {:.1} s",
            wait.as_secs_f64()
        );
    }
}

/// How often [`log_retry`] speaks.
const RETRY_LOG_EVERY: Duration = Duration::from_secs(10);

/// The wait a `Retry-After: <seconds>` header asks for, capped at [`RETRY_AFTER_CAP`];
/// `None` for other forms (an HTTP date falls back to the backoff).
fn retry_after(value: &str) -> Option<Duration> {
    let s = value.trim().parse::<f64>().ok()?;
    // Capped before it becomes a Duration: `Retry-After: 1e30` would overflow one.
    (s.is_finite() && s >= 0.0)
        .then(|| Duration::from_secs_f64(s.min(RETRY_AFTER_CAP.as_secs_f64())))
}

/// The reply text and usage of a chat-completion body; `None` when it is not one.
fn completion(body: &str) -> Option<(String, Usage)> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let message = v.get("choices")?.get(0)?.get("message")?;
    let text = match message.get("content")? {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        _ => return None,
    };
    let count = |k: &str| {
        v.get("usage")
            .and_then(|u| u.get(k))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let finish = v.get("choices")?.get(0)?.get("finish_reason");
    Some((
        text,
        Usage {
            prompt_tokens: count("prompt_tokens"),
            completion_tokens: count("completion_tokens"),
            cut_at_max_tokens: finish.and_then(serde_json::Value::as_str) == Some("length"),
        },
    ))
}

impl Llm for ChatClient {
    fn chat(&self, prompt: &str) -> Result<Reply, LlmError> {
        let c = &self.config;
        let body = serde_json::to_string(&ChatBody {
            model: &c.model,
            messages: [Message {
                role: "user",
                content: prompt,
            }],
            temperature: c.temperature,
            max_tokens: c.max_tokens,
        })
        .expect("a chat request serialises");
        let key = cache::key(&body);
        if let Some(hit) = self.cache.as_ref().and_then(|cache| cache.get(&key)) {
            return Ok(Reply {
                text: hit.text,
                usage: hit.usage,
                cached: true,
                retries: 0,
            });
        }
        let mut retries = 0;
        let interrupted = |retries, last: &str| LlmError {
            reason: format!("{INTERRUPTED_REASON}{last}"),
            retries,
        };
        loop {
            let Some(attempt) = self.attempt_unless_stopped(&body) else {
                return Err(interrupted(retries, ""));
            };
            let (why, wait) = match attempt {
                Attempt::Done(text, usage) => {
                    if let Some(cache) = &self.cache {
                        let entry = Entry {
                            request: serde_json::from_str(&body).expect("valid JSON"),
                            text: text.clone(),
                            usage,
                        };
                        cache.put(&key, &entry).map_err(|e| LlmError {
                            reason: format!("{e:#}"),
                            retries,
                        })?;
                    }
                    return Ok(Reply {
                        text,
                        usage,
                        cached: false,
                        retries,
                    });
                }
                Attempt::Fatal(reason) => return Err(LlmError { reason, retries }),
                Attempt::Retry(why, wait) => (why, wait),
            };
            if retries >= c.max_retries {
                return Err(LlmError {
                    reason: format!("gave up after {} attempts; last: {why}", retries + 1),
                    retries,
                });
            }
            let wait = wait.unwrap_or_else(|| self.backoff(retries));
            log_retry(&why, wait, retries + 1, c.max_retries);
            if !wait_unless_stopped(wait, c.stop) {
                return Err(interrupted(
                    retries,
                    &format!(" while waiting to retry (last: {why})"),
                ));
            }
            retries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_bodies_parse_and_others_do_not() {
        let ok = r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],
                    "usage":{"prompt_tokens":5,"completion_tokens":1}}"#;
        assert_eq!(
            completion(ok),
            Some((
                "hi".to_string(),
                Usage {
                    prompt_tokens: 5,
                    completion_tokens: 1,
                    cut_at_max_tokens: false,
                }
            ))
        );
        let cut = r#"{"choices":[{"message":{"content":"[ANS"},"finish_reason":"length"}]}"#;
        assert!(completion(cut).unwrap().1.cut_at_max_tokens);
        let no_usage = r#"{"choices":[{"message":{"content":null}}]}"#;
        assert_eq!(
            completion(no_usage),
            Some((String::new(), Usage::default()))
        );
        assert_eq!(completion("{\"choices\": ["), None);
        assert_eq!(completion("{\"error\": \"busy\"}"), None);
        assert_eq!(completion("<html>502</html>"), None);
    }

    #[test]
    fn retry_after_takes_seconds_and_is_capped() {
        assert_eq!(retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(retry_after("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(retry_after("86400"), Some(RETRY_AFTER_CAP));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after("-1"), None);
        // Past what a Duration holds: capped, no panic.
        assert_eq!(retry_after("1e30"), Some(RETRY_AFTER_CAP));
    }

    #[test]
    fn a_malformed_endpoint_is_refused_at_the_start() {
        let config = |endpoint: &str| ClientConfig {
            endpoint: endpoint.into(),
            model: "m".into(),
            api_key: None,
            temperature: 0.0,
            max_tokens: 8,
            timeout: Duration::from_secs(1),
            max_retries: 0,
            backoff_base: Duration::from_millis(1),
            backoff_max: Duration::from_millis(1),
            stop: None,
        };
        for bad in [
            "http://[::1",
            "http://exa mple:80",
            "http://127.0.0.1:99999",
            "http://:80",
        ] {
            let err = ChatClient::new(config(bad), None)
                .err()
                .expect(bad)
                .to_string();
            assert!(err.contains("not a valid URL"), "{bad}: {err}");
        }
        for good in [
            "http://[::1]:8000",
            "https://api.example/v1",
            "http://127.0.0.1:8000/",
        ] {
            assert!(ChatClient::new(config(good), None).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_set_stop_flag_ends_a_wait_at_once() {
        static STOP: AtomicBool = AtomicBool::new(true);
        assert!(!wait_unless_stopped(RETRY_AFTER_CAP, Some(&STOP)));
        assert!(wait_unless_stopped(Duration::from_millis(1), None));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let client = ChatClient::new(
            ClientConfig {
                endpoint: "http://127.0.0.1:9/v1/".into(),
                model: "m".into(),
                api_key: None,
                temperature: 0.0,
                max_tokens: 8,
                timeout: Duration::from_secs(1),
                max_retries: 3,
                backoff_base: Duration::from_millis(100),
                backoff_max: Duration::from_millis(1000),
                stop: None,
            },
            None,
        )
        .unwrap();
        assert_eq!(
            client.endpoint.url,
            "http://127.0.0.1:9/v1/chat/completions"
        );
        for (attempt, full) in [
            (0, 100.0),
            (1, 200.0),
            (3, 800.0),
            (4, 1000.0),
            (40, 1000.0),
        ] {
            let ms = client.backoff(attempt).as_secs_f64() * 1000.0;
            assert!(
                ms >= full * 0.5 - 1e-6 && ms < full,
                "attempt {attempt}: {ms} ms"
            );
        }
        assert!(ChatClient::new(
            ClientConfig {
                endpoint: "127.0.0.1:8000".into(),
                ..client.config.clone()
            },
            None
        )
        .is_err());
    }
}
