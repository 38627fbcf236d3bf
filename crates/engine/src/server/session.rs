//! A connection's session: its settings (what `SET`, `SHOW`, `RESET`,
//! `current_setting` and `set_config` see), the names of its prepared
//! statements, and the transaction status its ReadyForQuery messages carry.
//!
//! A setting is one of PostgreSQL's that the server knows ([`KNOWN`]), with
//! a default and a rule for `SET`, or any other name, accepted and kept as
//! a custom setting is. Known settings the server cannot honour refuse the
//! values it cannot honour with `0A000` (`transaction_isolation` other
//! than `serializable`, `default_transaction_read_only = on`, a
//! `client_encoding` other than UTF8, `standard_conforming_strings =
//! off`); read-only ones refuse `SET` with `55P02`. `statement_timeout` and
//! `idle_in_transaction_session_timeout` (a positive value; otherwise the
//! server's `--idle-in-transaction-timeout`) are honoured; `lock_timeout`
//! is checked and kept.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;
use std::time::Duration;

use pgwire::api::auth::DefaultServerParameterProvider;
use pgwire::messages::response::TransactionStatus;

use super::sql::SqlError;

/// How `SET` treats a known setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// Any value.
    Free,
    /// Shown, never set (`55P02`).
    ReadOnly,
    /// `serializable` only.
    Isolation,
    /// `off` only.
    Off,
    /// `on` only.
    On,
    /// UTF8 only.
    Encoding,
    /// A duration: milliseconds, or a number with a unit (`5s`, `1min`).
    Millis,
}

/// A known setting: its name as PostgreSQL spells it, its default, whether
/// a change is reported to the client (ParameterStatus, PostgreSQL's
/// GUC_REPORT), its rule, and what it is.
struct Known {
    name: &'static str,
    default: fn() -> String,
    report: bool,
    rule: Rule,
    about: &'static str,
}

/// The PostgreSQL version the server speaks as (major.minor): the one
/// place it is written; `server_version`, `server_version_num` and
/// `version()` follow from it.
macro_rules! pg_version {
    () => {
        "16.6"
    };
}

/// `server_version` as the login's ParameterStatus, `SHOW` and `version()`
/// give it: PostgreSQL's number, then this server in parentheses, as a
/// distribution's build says `16.6 (Debian 16.6-1)`; libpq, psycopg,
/// asyncpg, pgx and pgjdbc read the number before the space.
pub(crate) const SERVER_VERSION: &str =
    concat!(pg_version!(), " (islands ", env!("CARGO_PKG_VERSION"), ")");

/// The parameters a login reports (ParameterStatus): pgwire's defaults
/// with [`SERVER_VERSION`].
pub(crate) fn parameters() -> DefaultServerParameterProvider {
    let mut p = DefaultServerParameterProvider::default();
    p.server_version = SERVER_VERSION.to_string();
    p
}

fn provider() -> &'static DefaultServerParameterProvider {
    static P: OnceLock<DefaultServerParameterProvider> = OnceLock::new();
    P.get_or_init(parameters)
}

/// `SELECT version()`: PostgreSQL's form, `PostgreSQL 16.6 (islands x.y.z)
/// on ARCH-OS`.
pub(crate) fn version() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} on {}-{}",
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

/// PostgreSQL's `server_version_num`: 16.6 is 160006.
fn server_version_num() -> String {
    let (major, minor) = pg_version!()
        .split_once('.')
        .unwrap_or((pg_version!(), "0"));
    let number = |s: &str| s.parse::<u32>().unwrap_or(0);
    (number(major) * 10_000 + number(minor)).to_string()
}

const KNOWN: &[Known] = &[
    Known {
        name: "application_name",
        default: String::new,
        report: true,
        rule: Rule::Free,
        about: "the client's name for itself",
    },
    Known {
        name: "client_encoding",
        default: || "UTF8".into(),
        report: true,
        rule: Rule::Encoding,
        about: "the client's character set (UTF8 only)",
    },
    Known {
        name: "client_min_messages",
        default: || "notice".into(),
        report: false,
        rule: Rule::Free,
        about: "kept, not used",
    },
    Known {
        name: "DateStyle",
        default: || provider().date_style.clone(),
        report: true,
        rule: Rule::Free,
        about: "kept (this server has no date types)",
    },
    Known {
        name: "default_transaction_isolation",
        default: || "serializable".into(),
        report: false,
        rule: Rule::Isolation,
        about: "every transaction is serializable",
    },
    Known {
        name: "default_transaction_read_only",
        default: || "off".into(),
        report: true,
        rule: Rule::Off,
        about: "transactions may write",
    },
    Known {
        name: "extra_float_digits",
        default: || "1".into(),
        report: false,
        rule: Rule::Free,
        about: "kept; floats are sent in their shortest exact form",
    },
    Known {
        name: "idle_in_transaction_session_timeout",
        default: || "0".into(),
        report: false,
        rule: Rule::Millis,
        about: "a block idle this long is ended (0: the server's --idle-in-transaction-timeout)",
    },
    Known {
        name: "in_hot_standby",
        default: || "off".into(),
        report: true,
        rule: Rule::ReadOnly,
        about: "never a standby",
    },
    Known {
        name: "integer_datetimes",
        default: || "on".into(),
        report: true,
        rule: Rule::ReadOnly,
        about: "as PostgreSQL",
    },
    Known {
        name: "IntervalStyle",
        default: || provider().interval_style.clone(),
        report: true,
        rule: Rule::Free,
        about: "kept (no interval type)",
    },
    Known {
        name: "is_superuser",
        default: || "on".into(),
        report: true,
        rule: Rule::ReadOnly,
        about: "every user may call every procedure",
    },
    Known {
        name: "lock_timeout",
        default: || "0".into(),
        report: false,
        rule: Rule::Millis,
        about: "kept; lock waits are bounded by the engine",
    },
    Known {
        name: "max_identifier_length",
        default: || "63".into(),
        report: false,
        rule: Rule::ReadOnly,
        about: "as PostgreSQL",
    },
    Known {
        name: "search_path",
        default: || provider().search_path.clone(),
        report: false,
        rule: Rule::Free,
        about: "kept; everything is in schema public",
    },
    Known {
        name: "server_encoding",
        default: || "UTF8".into(),
        report: true,
        rule: Rule::ReadOnly,
        about: "UTF8",
    },
    Known {
        name: "server_version",
        default: || SERVER_VERSION.to_string(),
        report: true,
        rule: Rule::ReadOnly,
        about: "the PostgreSQL version the server speaks as",
    },
    Known {
        name: "server_version_num",
        default: server_version_num,
        report: false,
        rule: Rule::ReadOnly,
        about: "server_version as a number",
    },
    Known {
        name: "session_authorization",
        default: String::new,
        report: true,
        rule: Rule::ReadOnly,
        about: "the login user",
    },
    Known {
        name: "standard_conforming_strings",
        default: || "on".into(),
        report: true,
        rule: Rule::On,
        about: "backslashes are literal in '...'",
    },
    Known {
        name: "statement_timeout",
        default: || "0".into(),
        report: false,
        rule: Rule::Millis,
        about: "a statement running longer is canceled (57014); 0: never",
    },
    Known {
        name: "TimeZone",
        default: || provider().time_zone.clone(),
        report: true,
        rule: Rule::Free,
        about: "kept (this server has no time types)",
    },
    Known {
        name: "transaction_isolation",
        default: || "serializable".into(),
        report: false,
        rule: Rule::Isolation,
        about: "every transaction is serializable",
    },
    Known {
        name: "transaction_read_only",
        default: || "off".into(),
        report: false,
        rule: Rule::Off,
        about: "transactions may write",
    },
];

fn known(name: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.name.eq_ignore_ascii_case(name))
}

/// A duration setting's value in milliseconds: a bare number is
/// milliseconds; units `us`, `ms`, `s`, `min`, `h`, `d`.
pub(crate) fn parse_millis(v: &str) -> Option<u64> {
    let v = v.trim();
    let at = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(at);
    let n: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (n * scale).round();
    (ms.is_finite() && (0.0..=i32::MAX as f64).contains(&ms)).then_some(ms as u64)
}

/// A duration as PostgreSQL shows it: the largest unit that divides it.
fn show_millis(ms: u64) -> String {
    if ms == 0 {
        return "0".into();
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A connection's session state.
#[derive(Default)]
pub(crate) struct Session {
    /// Values from the startup message (what `RESET` returns to), by
    /// lower-case name.
    startup: BTreeMap<String, String>,
    started: bool,
    /// The database named at login.
    database: String,
    /// Values set by `SET` for the session, by lower-case name.
    values: BTreeMap<String, String>,
    /// Values set by `SET LOCAL`: they end with the transaction.
    local: BTreeMap<String, String>,
    /// Names of the statements prepared by Parse (for `DEALLOCATE ALL`).
    pub(crate) prepared: BTreeSet<String>,
    /// Where the connection is: outside a block, in one, in a failed one.
    pub(crate) block: BlockStatus,
}

/// A connection's transaction block, as ReadyForQuery reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum BlockStatus {
    /// Outside a block: every statement is its own transaction (`I`).
    #[default]
    Idle,
    /// In a block (`T`).
    Open,
    /// In a block a failed statement aborted: everything but its end is
    /// refused with `25P02` (`E`).
    Failed,
}

/// A setting's new value to report (ParameterStatus): name and value.
pub(crate) type Report = (String, String);

impl Session {
    /// Takes the startup message's settings (once, at the first statement).
    pub(crate) fn start(&mut self, startup: &HashMap<String, String>) {
        if self.started {
            return;
        }
        self.started = true;
        for (k, v) in startup {
            let k = k.to_ascii_lowercase();
            match k.as_str() {
                "user" => {
                    self.startup
                        .insert("session_authorization".into(), v.clone());
                }
                "database" => self.database = v.clone(),
                "options" | "replication" => {}
                _ => {
                    self.startup.insert(k, v.clone());
                }
            }
        }
    }

    /// The transaction status ReadyForQuery reports: the one place it is
    /// decided.
    pub(crate) fn status(&self) -> TransactionStatus {
        match self.block {
            BlockStatus::Idle => TransactionStatus::Idle,
            BlockStatus::Open => TransactionStatus::Transaction,
            BlockStatus::Failed => TransactionStatus::Error,
        }
    }

    /// How long a block may stay idle before it is ended: the session's
    /// `idle_in_transaction_session_timeout` when positive, else `server`.
    pub(crate) fn idle_in_transaction_timeout(&self, server: Option<Duration>) -> Option<Duration> {
        let ms = self
            .get("idle_in_transaction_session_timeout")
            .and_then(|v| parse_millis(&v))
            .unwrap_or(0);
        if ms > 0 {
            Some(Duration::from_millis(ms))
        } else {
            server
        }
    }

    /// The login user.
    pub(crate) fn user(&self) -> String {
        self.get("session_authorization").unwrap_or_default()
    }

    /// The database named at login.
    pub(crate) fn database(&self) -> String {
        self.database.clone()
    }

    /// A setting's value; `None` for a name never set and not known.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        let key = name.to_ascii_lowercase();
        if let Some(v) = self.local.get(&key).or(self.values.get(&key)) {
            return Some(v.clone());
        }
        if let Some(v) = self.startup.get(&key) {
            return Some(v.clone());
        }
        known(&key).map(|k| (k.default)())
    }

    /// A setting's value, or `42704` naming it.
    pub(crate) fn show(&self, name: &str) -> Result<String, SqlError> {
        self.get(name).ok_or_else(|| {
            SqlError::new(
                "42704",
                format!("unrecognized configuration parameter \"{name}\""),
            )
        })
    }

    /// The statement timeout (`None`: none).
    pub(crate) fn statement_timeout(&self) -> Option<Duration> {
        let ms = self
            .get("statement_timeout")
            .and_then(|v| parse_millis(&v))
            .unwrap_or(0);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    /// `SET name = value` (`None`: `DEFAULT`), for the session or (`local`)
    /// the transaction. Returns the change to report, if the setting is
    /// reported and its value changed.
    pub(crate) fn set(
        &mut self,
        name: &str,
        value: Option<&str>,
        local: bool,
    ) -> Result<Option<Report>, SqlError> {
        let key = name.to_ascii_lowercase();
        let before = self.get(&key);
        let k = known(&key);
        let value = match (value, k) {
            (None, _) => None,
            (Some(v), None) => Some(v.to_string()),
            (Some(v), Some(k)) => Some(Self::check(k, v)?),
        };
        if let Some(k) = k {
            if k.rule == Rule::ReadOnly {
                return Err(SqlError::new(
                    "55P02",
                    format!("parameter \"{}\" cannot be changed", k.name),
                ));
            }
        }
        let map = if local {
            &mut self.local
        } else {
            self.local.remove(&key);
            &mut self.values
        };
        match value {
            Some(v) => {
                map.insert(key.clone(), v);
            }
            None => {
                map.remove(&key);
            }
        }
        Ok(self.report(&key, before))
    }

    /// A known setting's value checked against its rule (and shown as
    /// PostgreSQL shows it).
    fn check(k: &Known, v: &str) -> Result<String, SqlError> {
        let lower = v.trim().to_ascii_lowercase();
        let refuse = |why: &str| {
            SqlError::new(
                "0A000",
                format!("{} = {v:?} is not supported: {why}", k.name),
            )
        };
        Ok(match k.rule {
            Rule::Free | Rule::ReadOnly => v.to_string(),
            Rule::Isolation => match lower.as_str() {
                "serializable" => lower,
                _ => return Err(refuse("every transaction here is serializable")),
            },
            Rule::Off => match lower.as_str() {
                "off" | "false" | "0" | "no" => "off".into(),
                _ => return Err(refuse("transactions here read and write")),
            },
            Rule::On => match lower.as_str() {
                "on" | "true" | "1" | "yes" => "on".into(),
                _ => return Err(refuse("this server reads strings as standard SQL strings")),
            },
            Rule::Encoding => match lower.as_str() {
                "utf8" | "utf-8" | "unicode" => "UTF8".into(),
                _ => return Err(refuse("this server speaks UTF8 only")),
            },
            Rule::Millis => match parse_millis(&lower) {
                Some(ms) => show_millis(ms),
                None => {
                    return Err(SqlError::new(
                        "22023",
                        format!(
                            "invalid value for parameter \"{}\": {v:?} (milliseconds, or a number with a unit: 5s, 1min)",
                            k.name
                        ),
                    ))
                }
            },
        })
    }

    /// The ParameterStatus to send for `key` if it is reported and its
    /// value is no longer `before`.
    fn report(&self, key: &str, before: Option<String>) -> Option<Report> {
        let k = known(key).filter(|k| k.report)?;
        let now = self.get(key)?;
        (before.as_deref() != Some(now.as_str())).then(|| (k.name.to_string(), now))
    }

    /// `RESET name`.
    pub(crate) fn reset(&mut self, name: &str) -> Result<Option<Report>, SqlError> {
        if let Some(k) = known(name) {
            if k.rule == Rule::ReadOnly {
                return Err(SqlError::new(
                    "55P02",
                    format!("parameter \"{}\" cannot be changed", k.name),
                ));
            }
        }
        self.set(name, None, false)
    }

    /// `RESET ALL`: every setting back to its startup value or default.
    pub(crate) fn reset_all(&mut self) -> Vec<Report> {
        let keys: BTreeSet<String> = self
            .values
            .keys()
            .chain(self.local.keys())
            .cloned()
            .collect();
        let before: Vec<(String, Option<String>)> =
            keys.iter().map(|k| (k.clone(), self.get(k))).collect();
        self.values.clear();
        self.local.clear();
        before
            .into_iter()
            .filter_map(|(k, b)| self.report(&k, b))
            .collect()
    }

    /// The end of a transaction: `SET LOCAL` values end with it.
    pub(crate) fn end_transaction(&mut self) -> Vec<Report> {
        if self.local.is_empty() {
            return Vec::new();
        }
        let keys: Vec<String> = self.local.keys().cloned().collect();
        let before: Vec<(String, Option<String>)> =
            keys.iter().map(|k| (k.clone(), self.get(k))).collect();
        self.local.clear();
        before
            .into_iter()
            .filter_map(|(k, b)| self.report(&k, b))
            .collect()
    }

    /// `SHOW ALL`: name, value, description of the known settings and
    /// those set in the session.
    pub(crate) fn all(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = KNOWN
            .iter()
            .map(|k| {
                (
                    k.name.to_string(),
                    self.get(k.name).unwrap_or_default(),
                    k.about.to_string(),
                )
            })
            .collect();
        let custom: BTreeSet<&String> = self
            .values
            .keys()
            .chain(self.local.keys())
            .chain(self.startup.keys())
            .filter(|k| known(k).is_none())
            .collect();
        for k in custom {
            out.push((
                k.clone(),
                self.get(k).unwrap_or_default(),
                "a custom setting, kept".into(),
            ));
        }
        out.sort_by_key(|(n, _, _)| n.to_ascii_lowercase());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_set_show_reset_and_refuse_what_cannot_be_honoured() {
        let mut s = Session::default();
        let mut startup = HashMap::new();
        startup.insert("application_name".to_string(), "psql".to_string());
        startup.insert("user".to_string(), "ann".to_string());
        s.start(&startup);
        assert_eq!(s.show("transaction_isolation").unwrap(), "serializable");
        assert_eq!(s.show("APPLICATION_NAME").unwrap(), "psql");
        assert_eq!(s.user(), "ann");
        assert_eq!(s.show("server_version_num").unwrap(), "160006");
        // PostgreSQL's number first, as drivers parse it (asyncpg's regex
        // takes digits, a dot, digits; libpq's sscanf "%d.%d").
        let v = s.show("server_version").unwrap();
        assert!(v.starts_with("16.6 (islands "), "{v}");
        assert!(version().starts_with(&format!("PostgreSQL {v} on ")));
        assert_eq!(s.show("nope").unwrap_err().code, "42704");
        // A reported setting reports its change, once.
        assert_eq!(
            s.set("application_name", Some("app"), false).unwrap(),
            Some(("application_name".into(), "app".into()))
        );
        assert_eq!(s.set("application_name", Some("app"), false).unwrap(), None);
        assert_eq!(s.set("my.custom", Some("x"), false).unwrap(), None);
        assert_eq!(s.show("my.custom").unwrap(), "x");
        assert_eq!(s.set("statement_timeout", Some("5s"), false).unwrap(), None);
        assert_eq!(s.show("statement_timeout").unwrap(), "5s");
        assert_eq!(s.statement_timeout(), Some(Duration::from_secs(5)));
        s.set("statement_timeout", Some("1500"), false).unwrap();
        assert_eq!(s.show("statement_timeout").unwrap(), "1500ms");
        for (name, value, code) in [
            ("transaction_isolation", "read committed", "0A000"),
            ("default_transaction_isolation", "repeatable read", "0A000"),
            ("default_transaction_read_only", "on", "0A000"),
            ("client_encoding", "LATIN1", "0A000"),
            ("standard_conforming_strings", "off", "0A000"),
            ("server_version", "1", "55P02"),
            ("statement_timeout", "soon", "22023"),
        ] {
            assert_eq!(
                s.set(name, Some(value), false).unwrap_err().code,
                code,
                "{name}"
            );
        }
        assert!(s
            .set("transaction_isolation", Some("SERIALIZABLE"), false)
            .is_ok());
        // SET LOCAL ends with the transaction.
        s.set("search_path", Some("x"), true).unwrap();
        assert_eq!(s.show("search_path").unwrap(), "x");
        s.end_transaction();
        assert_eq!(s.show("search_path").unwrap(), provider().search_path);
        // RESET ALL returns to the startup values, and reports them.
        let reports = s.reset_all();
        assert_eq!(reports, vec![("application_name".into(), "psql".into())]);
        assert_eq!(s.show("statement_timeout").unwrap(), "0");
        assert_eq!(s.statement_timeout(), None);
        assert!(s.show("my.custom").is_err());
        assert!(s
            .all()
            .iter()
            .any(|(n, v, _)| n == "TimeZone" && !v.is_empty()));
    }
}
