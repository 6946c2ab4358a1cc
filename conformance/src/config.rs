//! Config builders: YAML files naming the test backends, with short timeouts and intervals so
//! that cases run fast.
//!
//! A [`Config`] is a tree of values with test defaults; cases change single keys with
//! [`Config::set`] (`"server.retry.max_attempts"`) and render it with [`Config::yaml`].

use serde_json::{Map, Value, json};

use crate::backend::Backend;

/// The bearer token given to the child for the management plane.
pub const ADMIN_TOKEN: &str = "conformance-admin-token";

/// A proxy configuration under construction.
#[derive(Debug, Clone)]
pub struct Config {
    root: Value,
    backends: Vec<Backend>,
    env: Vec<(String, String)>,
}

/// One backend entry of a pool.
#[derive(Debug, Clone)]
pub struct Entry {
    backend: Backend,
    weight: Option<u32>,
    disabled: bool,
    url: Option<String>,
}

impl Entry {
    /// Sets the weight.
    pub fn weight(mut self, w: u32) -> Entry {
        self.weight = Some(w);
        self
    }
    /// Marks it `disabled: true`.
    pub fn disabled(mut self) -> Entry {
        self.disabled = true;
        self
    }
    /// Uses this URL instead of the backend's own (e.g. with a base path).
    pub fn url(mut self, url: &str) -> Entry {
        self.url = Some(url.to_string());
        self
    }
    fn value(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.backend.id()));
        m.insert(
            "url".into(),
            json!(self.url.clone().unwrap_or_else(|| self.backend.url())),
        );
        if let Some(w) = self.weight {
            m.insert("weight".into(), json!(w));
        }
        if self.disabled {
            m.insert("disabled".into(), json!(true));
        }
        Value::Object(m)
    }
}

impl From<&Backend> for Entry {
    fn from(b: &Backend) -> Entry {
        Entry {
            backend: b.clone(),
            weight: None,
            disabled: false,
            url: None,
        }
    }
}

/// `backend` as an entry to adjust (`entry(&b).weight(5)`).
pub fn entry(b: &Backend) -> Entry {
    Entry::from(b)
}

impl Config {
    /// The test defaults with `backends` as the default pool (round robin): health every 100ms
    /// without jitter, thresholds 1, cooldown 1s, slow start off, retries as shipped but with a
    /// large budget, per-try timeout 2s, dial timeout 500ms, rate limiting and management off.
    /// The probe timeout is a generous 5s: with a failure threshold of 1, one probe of a
    /// healthy test backend answered late on a loaded machine would take it out of the pool;
    /// cases about slow probes set their own.
    pub fn new(backends: &[&Backend]) -> Config {
        let entries: Vec<Entry> = backends.iter().map(|b| Entry::from(*b)).collect();
        Config::with_entries(entries)
    }

    /// Like [`Config::new`] with adjusted entries.
    pub fn with_entries(entries: Vec<Entry>) -> Config {
        let root = json!({
            "server": {
                "read_header_timeout": "2s",
                "idle_timeout": "30s",
                "shutdown_timeout": "5s",
                "write_timeout": "0s",
                "upstream": { "dial_timeout": "500ms" },
                "retry": {
                    "max_attempts": 2,
                    "per_try_timeout": "2s",
                    "budget_capacity": 1000,
                    "budget_refill_per_second": 100
                },
                "overload": { "max_concurrent_requests": 2048, "queue_timeout": "50ms" }
            },
            "health_check": {
                "mode": "http",
                "path": "/health",
                "interval": "100ms",
                "timeout": "5s",
                "jitter": "0s",
                "failure_threshold": 1,
                "success_threshold": 1,
                "cooldown": "1s",
                "max_cooldown": "10s",
                "slow_start": "0s"
            },
            "rate_limit": { "enabled": false },
            "management": { "enabled": false },
            "balancing": { "policy": "round_robin" },
            "backends": []
        });
        let mut c = Config {
            root,
            backends: Vec::new(),
            env: Vec::new(),
        };
        c = c.set_entries("backends", entries);
        c
    }

    fn set_entries(mut self, path: &str, entries: Vec<Entry>) -> Config {
        for e in &entries {
            if !self.backends.iter().any(|b| b.id() == e.backend.id()) {
                self.backends.push(e.backend.clone());
            }
        }
        let list: Vec<Value> = entries.iter().map(Entry::value).collect();
        self.set(path, Value::Array(list))
    }

    /// Sets the value at a dotted path (`server.retry.max_attempts`), creating sections.
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Config {
        let mut cur = &mut self.root;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, p) in parts.iter().enumerate() {
            if !cur.is_object() {
                *cur = Value::Object(Map::new());
            }
            let Value::Object(m) = cur else {
                unreachable!("made an object above")
            };
            if i + 1 == parts.len() {
                m.insert((*p).to_string(), value.into());
                return self;
            }
            cur = m
                .entry((*p).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        self
    }

    /// Removes the value at a dotted path (the proxy's default applies).
    pub fn unset(mut self, path: &str) -> Config {
        let parts: Vec<&str> = path.split('.').collect();
        let mut cur = &mut self.root;
        for p in &parts[..parts.len() - 1] {
            match cur.get_mut(*p) {
                Some(v) => cur = v,
                None => return self,
            }
        }
        if let Value::Object(m) = cur {
            m.remove(parts[parts.len() - 1]);
        }
        self
    }

    /// `balancing.policy` of the default pool.
    pub fn policy(self, policy: &str) -> Config {
        self.set("balancing.policy", policy)
    }

    /// `balancing.hash_key` of the default pool.
    pub fn hash_key(self, key: &str) -> Config {
        self.set("balancing.hash_key", key)
    }

    /// Adds the named pool `name` with `policy` and `backends`.
    pub fn pool(self, name: &str, policy: &str, backends: &[&Backend]) -> Config {
        let c = self.set(&format!("pools.{name}.balancing.policy"), policy);
        c.set_entries(
            &format!("pools.{name}.backends"),
            backends.iter().map(|b| Entry::from(*b)).collect(),
        )
    }

    /// Adds a route `prefix → pool`, with a bulkhead when `max` is set.
    pub fn route(mut self, prefix: &str, pool: &str, max: Option<u32>) -> Config {
        let mut r = Map::new();
        r.insert("prefix".into(), json!(prefix));
        r.insert("pool".into(), json!(pool));
        if let Some(m) = max {
            r.insert("max_concurrent_requests".into(), json!(m));
        }
        let routes = self
            .root
            .as_object_mut()
            .expect("root is a mapping")
            .entry("routes")
            .or_insert(json!([]));
        if let Value::Array(a) = routes {
            a.push(Value::Object(r));
        }
        self
    }

    /// Adds a route `prefix → pool` whose requests are mirrored to `mirror_pool` (C-MIRROR-1),
    /// `percent` of them when set (the proxy's default, 100, otherwise).
    pub fn mirror_route(
        mut self,
        prefix: &str,
        pool: &str,
        mirror_pool: &str,
        percent: Option<u32>,
    ) -> Config {
        let mut m = Map::new();
        m.insert("pool".into(), json!(mirror_pool));
        if let Some(p) = percent {
            m.insert("percent".into(), json!(p));
        }
        let mut r = Map::new();
        r.insert("prefix".into(), json!(prefix));
        r.insert("pool".into(), json!(pool));
        r.insert("mirror".into(), Value::Object(m));
        let routes = self
            .root
            .as_object_mut()
            .expect("root is a mapping")
            .entry("routes")
            .or_insert(json!([]));
        if let Value::Array(a) = routes {
            a.push(Value::Object(r));
        }
        self
    }

    /// Passive ejection effectively off: `failure_threshold: 255` (also makes active checks need
    /// 255 failures, so only for cases that do not flip health).
    pub fn passive_off(self) -> Config {
        self.set("health_check.failure_threshold", 255)
    }

    /// Rate limiting on (local store) with `capacity` and `refill_per_second`.
    pub fn rate_limit(self, capacity: u64, refill_per_second: f64) -> Config {
        self.set("rate_limit.enabled", true)
            .set("rate_limit.storage", "local")
            .set("rate_limit.capacity", capacity)
            .set("rate_limit.refill_per_second", refill_per_second)
    }

    /// `server.trusted_proxies`.
    pub fn trusted(self, cidrs: &[&str]) -> Config {
        self.set("server.trusted_proxies", json!(cidrs))
    }

    /// Management on (its listener bound by the harness on 127.0.0.1:0), with [`ADMIN_TOKEN`]
    /// given to the child in `BALANCER_ADMIN_TOKEN`.
    pub fn management(mut self) -> Config {
        self.env
            .push(("BALANCER_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()));
        self.set("management.enabled", true)
            .set("management.address", "127.0.0.1:9090")
            .set("management.auth_token_env", "BALANCER_ADMIN_TOKEN")
    }

    /// Whether `management.enabled` is true.
    pub fn management_enabled(&self) -> bool {
        self.root
            .pointer("/management/enabled")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// Environment for the child.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env.clone()
    }

    /// The backends this config names (for failure messages).
    pub fn backends_used(&self) -> Vec<Backend> {
        self.backends.clone()
    }

    /// The config as a YAML document.
    pub fn yaml(&self) -> String {
        let mut out = String::from("# written by weir-conformance\n");
        emit(&self.root, 0, &mut out);
        out
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        // A JSON string literal is a valid YAML double-quoted scalar.
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
        _ => false,
    }
}

fn emit(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                if is_block(val) {
                    out.push_str(&format!("{pad}{k}:\n"));
                    emit(val, indent + 2, out);
                } else {
                    out.push_str(&format!("{pad}{k}: {}\n", scalar(val)));
                }
            }
        }
        Value::Array(a) => {
            for item in a {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        // "- " then the first key inline, the rest indented under it.
                        let mut first = true;
                        for (k, val) in m {
                            let lead = if first {
                                format!("{pad}- ")
                            } else {
                                format!("{pad}  ")
                            };
                            first = false;
                            if is_block(val) {
                                out.push_str(&format!("{lead}{k}:\n"));
                                emit(val, indent + 4, out);
                            } else {
                                out.push_str(&format!("{lead}{k}: {}\n", scalar(val)));
                            }
                        }
                    }
                    other if is_block(other) => {
                        out.push_str(&format!("{pad}-\n"));
                        emit(other, indent + 2, out);
                    }
                    other => out.push_str(&format!("{pad}- {}\n", scalar(other))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}
