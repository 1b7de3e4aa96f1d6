//! Redaction of everything that goes into a report bundle: home folders and user names in
//! Linux, macOS, WSL and Windows path forms, host names, e-mail and IP addresses, tokens by
//! pattern, values of secret-named keys, environment variables outside the allowlist, and
//! the `current_inputs` of ComfyUI's `execution_error` (which carry the whole prompt).
//!
//! The rules follow Sentry's data scrubbers (Sentry's `@userpath`, `@email`, `@ip`, `@password`
//! scrubbers; comfy-cli dropping `current_inputs`). Users paste logs with their full Windows
//! name in every path (#15255); API keys travel in workflow inputs and `extra_data`.
//!
//! Pure: the machine's own names come in through [`Identity`], and every replacement is
//! counted per [`Kind`] so the tool can say what it removed. Placeholders use square brackets
//! (`[user]`, `[token]`), which Markdown shows as they are (angle brackets would vanish as
//! HTML tags in a GitHub issue), and no rule matches its own placeholder, so redacting twice
//! changes nothing.

use regex::{Captures, Regex};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// What a redaction removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    HomePath,
    UserName,
    HostName,
    Email,
    IpAddress,
    Token,
    Bearer,
    UrlCredentials,
    PrivateKey,
    SecretValue,
    EnvVar,
    ErrorInputs,
}

impl Kind {
    /// The JSON name (`home_path`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::HomePath => "home_path",
            Kind::UserName => "user_name",
            Kind::HostName => "host_name",
            Kind::Email => "email",
            Kind::IpAddress => "ip_address",
            Kind::Token => "token",
            Kind::Bearer => "bearer",
            Kind::UrlCredentials => "url_credentials",
            Kind::PrivateKey => "private_key",
            Kind::SecretValue => "secret_value",
            Kind::EnvVar => "env_var",
            Kind::ErrorInputs => "error_inputs",
        }
    }

    /// A few words for people.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::HomePath => "home folders in paths",
            Kind::UserName => "user names",
            Kind::HostName => "host names",
            Kind::Email => "e-mail addresses",
            Kind::IpAddress => "IP addresses (loopback kept)",
            Kind::Token => "tokens (hf_, sk-, ghp_, github_pat_, AWS keys, …)",
            Kind::Bearer => "Authorization header values",
            Kind::UrlCredentials => "credentials in URLs",
            Kind::PrivateKey => "private keys",
            Kind::SecretValue => "values of secret-named keys (api_key, token, password, …)",
            Kind::EnvVar => "environment variables outside the allowlist",
            Kind::ErrorInputs => "current_inputs of execution errors (the whole prompt)",
        }
    }
}

/// Redactions per kind, for one file or a whole bundle.
pub type Redactions = BTreeMap<Kind, usize>;

fn bump(tally: &mut Redactions, kind: Kind) {
    *tally.entry(kind).or_insert(0) += 1;
}

/// What replaces a secret value.
pub const REDACTED: &str = "[redacted]";
/// What replaces `current_inputs`.
pub const INPUTS_REMOVED: &str =
    "[removed by vrambisect: current_inputs carry the whole prompt and any API keys in it]";

pub use crate::machine::{ENV_ALLOWLIST, env_allowed};

/// Account names that identify nobody (service and container accounts, placeholders): they
/// are not replaced where they stand alone, since words like "root" or "user" also appear in
/// ComfyUI's own log lines.
const GENERIC_NAMES: &[&str] = &[
    "root",
    "user",
    "users",
    "admin",
    "administrator",
    "default",
    "default user",
    "all users",
    "public",
    "shared",
    "guest",
    "runner",
    "ubuntu",
    "debian",
    "ec2-user",
    "azureuser",
    "jovyan",
    "vscode",
    "docker",
    "home",
    "comfy",
    "comfyui",
    "python",
    "localhost",
    "[user]",
    "[host]",
];

fn generic(name: &str) -> bool {
    GENERIC_NAMES.iter().any(|g| g.eq_ignore_ascii_case(name))
}

/// The words of ComfyUI's code and logs (`scripts/redaction-vocabulary.py` writes the list).
/// A user name that is one of them ("model", "max", "mark") is redacted in paths only:
/// replaced wherever it stands it would turn `model_management` into `[user]_management`,
/// and where it stands as that word it names nobody.
const VOCABULARY: &str = include_str!("vocabulary.txt");

/// Whether `name` is one word of ComfyUI's code and logs.
pub(crate) fn is_vocabulary_word(name: &str) -> bool {
    static WORDS: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    let words = WORDS.get_or_init(|| VOCABULARY.lines().map(str::trim).collect());
    words.contains(name.to_ascii_lowercase().as_str())
}

/// The machine's own names, which are redacted wherever they appear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Home folders (`/home/alice`, `C:\Users\Alice Smith`), replaced by `~`.
    pub homes: Vec<String>,
    /// Account and person names, replaced by `[user]` where they stand as a word.
    pub users: Vec<String>,
    /// Host names, replaced by `[host]` where they stand as a word.
    pub hosts: Vec<String>,
}

impl Identity {
    /// This machine: `$HOME`/`%USERPROFILE%`, `$USER`/`$LOGNAME`/`%USERNAME%`, the host name.
    pub fn from_machine() -> Identity {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut id = Identity::default();
        for k in ["HOME", "USERPROFILE"] {
            if let Some(h) = var(k) {
                id.add_home(&h);
            }
        }
        for k in ["USER", "LOGNAME", "USERNAME"] {
            if let Some(u) = var(k) {
                id.add_user(&u);
            }
        }
        for h in [var("HOSTNAME"), var("COMPUTERNAME"), host_name()]
            .into_iter()
            .flatten()
        {
            id.add_host(&h);
        }
        id
    }

    /// Adds a home folder (and its last segment as a user name).
    pub fn add_home(&mut self, home: &str) {
        let home = home.trim_end_matches(['/', '\\']);
        // "/" or "C:" as a home would swallow every path.
        if home.len() < 3 || self.homes.iter().any(|h| h == home) {
            return;
        }
        self.homes.push(home.to_string());
        if let Some(last) = home.rsplit(['/', '\\']).next() {
            self.add_user(last);
        }
    }

    /// Adds a user name (ignored when generic or shorter than 3 characters), and each word
    /// of a name of several (`Marta Lopez`: also `Marta`, `Lopez`, which a prompt or a file
    /// name may hold alone).
    pub fn add_user(&mut self, name: &str) {
        let name = name.trim();
        if name.chars().count() < 3
            || generic(name)
            || self.users.iter().any(|u| u.eq_ignore_ascii_case(name))
        {
            return;
        }
        self.users.push(name.to_string());
        let parts: Vec<&str> = name.split_whitespace().collect();
        if parts.len() > 1 {
            for part in parts {
                self.add_user(part);
            }
        }
    }

    /// Adds a host name, and its first label when it is a dotted name.
    pub fn add_host(&mut self, host: &str) {
        let host = host.trim().trim_end_matches('.');
        for h in [Some(host), host.split('.').next()].into_iter().flatten() {
            if h.chars().count() < 3
                || generic(h)
                || h.parse::<std::net::IpAddr>().is_ok()
                || self.hosts.iter().any(|x| x.eq_ignore_ascii_case(h))
            {
                continue;
            }
            self.hosts.push(h.to_string());
        }
    }

    /// Learns the user names that appear in home-folder paths of `text` (a first pass over
    /// every file, so that a name seen in one file's path is also removed from the others).
    pub fn learn(&mut self, text: &str) {
        let r = rules();
        for re in [&r.win_user, &r.unix_home, &r.mac_user] {
            for c in re.captures_iter(text) {
                if let Some(n) = c.name("name") {
                    self.add_user(n.as_str());
                }
            }
        }
    }
}

/// This machine's host name (`gethostname`; on Windows the computer name).
fn host_name() -> Option<String> {
    sysinfo::System::host_name()
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
}

/// Whether a key, widget, variable or parameter name is one whose value is secret.
///
/// Sentry's default list (`password`, `secret`, `passwd`, `api_key`, `apikey`, `auth`,
/// `credentials`, `mysql_pwd`, `privatekey`, `private_key`, `token`, `bearer`), matched by
/// word rather than by substring, so `max_tokens`, `tokenizer` and `author` keep their values.
pub fn is_secret_name(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    const ANYWHERE: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "apikey",
        "api_key",
        "api-key",
        "privatekey",
        "private_key",
        "accesskey",
        "access_key",
        "accesstoken",
        "authtoken",
        "credential",
        "bearer",
        "csrf",
    ];
    if ANYWHERE.iter().any(|w| lower.contains(w)) {
        return true;
    }
    const WORDS: &[&str] = &[
        "token",
        "auth",
        "authorization",
        "pwd",
        "cookie",
        "sessionid",
        "sid",
        "jwt",
    ];
    let w = words(key);
    // `openai_key`, `replicateKey`: a name that ends in "key" after another word.
    (w.len() >= 2 && w.last().is_some_and(|l| l == "key"))
        || w.iter().any(|w| WORDS.contains(&w.as_str()))
}

/// `apiKey`, `api_key`, `API-KEY`, `x.auth` → lower-case words.
fn words(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A value not worth hiding under a secret-named key (`None`, `false`, a small count).
fn harmless_value(v: &str) -> bool {
    let t = v.trim_matches(|c| c == '"' || c == '\'').trim();
    t.is_empty()
        || t.starts_with('[') && t.ends_with(']')
        || matches!(
            t.to_ascii_lowercase().as_str(),
            "none"
                | "null"
                | "true"
                | "false"
                | "nil"
                | "undefined"
                | "***"
                | "<redacted>"
                // HTTP schemes whose credential another rule has already replaced
                | "bearer"
                | "basic"
                | "digest"
                | "token"
        )
        || (t.len() <= 6 && t.chars().all(|c| c.is_ascii_digit()))
}

struct Rules {
    pem: Regex,
    pem_open: Regex,
    flag_value: Regex,
    url: Regex,
    local_host: Regex,
    cookie: Regex,
    bare_query: Regex,
    hex32: Regex,
    aws_key_id: Regex,
    aws_secret: Regex,
    url_credentials: Regex,
    bearer: Regex,
    tokens: Vec<Regex>,
    assignment: Regex,
    win_user: Regex,
    unix_home: Regex,
    mac_user: Regex,
    mac_temp: Regex,
    email: Regex,
    ipv4: Regex,
    ipv6: Regex,
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        let re = |s: &str| Regex::new(s).expect("redaction pattern compiles");
        Rules {
            pem: re(
                r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
            ),
            // A pasted key whose END line is missing: the body runs to the first line that
            // is not base64.
            pem_open: re(
                r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----(?:[ \t]*\r?\n?[ \t]*[A-Za-z0-9+/=]{8,})*",
            ),
            // `--password VALUE`, `--api-key VALUE`: a secret flag with its value after a space.
            flag_value: re(r#"(?P<pre>^|[\s"'(\[,=])(?P<flag>--?(?P<key>[A-Za-z][A-Za-z0-9_-]*))(?P<sp>[ \t]+)(?P<val>"[^"\n]*"|'[^'\n]*'|[^\s"'-][^\s]*)"#),
            url: re(r#"(?i)\b(?:https?|wss?|ftp)://[^\s"'<>`]+"#),
            // Names that only a local network resolves (mDNS, home routers, private DNS).
            local_host: re(
                r"(?i)(?P<pre>^|[^A-Za-z0-9_.'])(?P<host>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.(?P<tld>local|lan|home|internal|intranet|localdomain|home\.arpa|fritz\.box|corp))(?P<post>[^A-Za-z0-9_(]|$)",
            ),
            cookie: re(r"(?im)^(?P<key>\s*(?:set-)?cookie:\s*)(?P<val>.+)$"),
            bare_query: re(r"(?P<sep>[?&])(?P<k>[A-Za-z][A-Za-z0-9_.-]*)=(?P<v>[^\s&#\x22']+)"),
            // 32 hex digits standing alone: an API key (Civitai's have no prefix), an MD5.
            hex32: re(r"\b[0-9a-fA-F]{32}\b"),
            aws_key_id: re(AWS_KEY_ID),
            // 40 characters of base64 standing alone: an AWS secret access key, when its line
            // names a key id (a secret has no prefix of its own).
            aws_secret: re(r"(?P<pre>^|[^A-Za-z0-9/+=])(?P<s>[A-Za-z0-9/+]{40})(?P<post>[^A-Za-z0-9/+=]|$)"),
            url_credentials: re(r"\b([A-Za-z][A-Za-z0-9+.-]{1,20}://)([^/\s:@\[\]]+):([^/\s@]+)@"),
            bearer: re(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/-]{8,}=*)"),
            tokens: [
                // Hugging Face (hf_ + 34), OpenAI/Anthropic (sk-, sk-proj-, sk-ant-…).
                r"\bhf_[A-Za-z0-9]{20,}\b",
                r"\bsk-[A-Za-z0-9_-]{20,}",
                // GitHub classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained tokens.
                r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
                r"\bgithub_pat_[A-Za-z0-9_]{20,}\b",
                // AWS access key ids; GitLab, Slack, Google API keys, Stripe, JWTs.
                AWS_KEY_ID,
                r"\bglpat-[A-Za-z0-9_-]{20,}",
                r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
                r"\bAIza[0-9A-Za-z_-]{35}\b",
                r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",
                r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            ]
            .iter()
            .map(|s| re(s))
            .collect(),
            // `key = value`, `key: value`, `"key": "value"`, `'key': 'value'`, `--key=value`;
            // an HTTP scheme word before the value is kept.
            assignment: re(
                r#"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P<q>["']?)(?P<sep>[ \t]*[:=][ \t]*)(?P<scheme>(?:Basic|Bearer|Token|Digest)[ \t]+)?(?P<val>"[^"\n]*"|'[^'\n]*'|[^\s"',;)}\[\]]+)"#,
            ),
            // C:\Users\<name>\, C:/Users/<name>/, C:\\Users\\<name>\\ (JSON), Documents and
            // Settings; names may hold spaces, so they run to the next separator.
            win_user: re(
                r#"(?im)\b(?P<pre>[A-Z]:(?:\\\\|\\|/)(?:Users|Documents and Settings)(?:\\\\|\\|/))(?P<name>[^\\/\r\n"'<>|:*?\[\]]+)(?P<sep>\\\\|\\|/|"|'|$)"#,
            ),
            // /home/<name>, /var/home/<name>, /Users/<name> (macOS, and WSL's /mnt/c/Users).
            unix_home: re(r#"(?P<pre>/home/)(?P<name>[^/\s"'\\\[\]]+)"#),
            mac_user: re(r#"(?P<pre>/Users/)(?P<name>[^/\s"'\\\[\]]+)"#),
            mac_temp: re(r"/var/folders/[A-Za-z0-9_+-]{2}/[A-Za-z0-9_+-]{6,}/"),
            email: re(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
            ipv4: re(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"),
            ipv6: re(r"(?i)[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}"),
        }
    })
}

/// Redacts text and JSON; holds the machine's names as ready patterns.
#[derive(Debug, Clone)]
pub struct Redactor {
    homes: Vec<Regex>,
    users: Option<Regex>,
    short_users: Option<Regex>,
    hosts: Option<Regex>,
    /// User names that are words of ComfyUI's code and logs: redacted in paths only.
    in_paths_only: Vec<String>,
    /// Those names as a whole segment of any path (`/media/max/`, `D:\max\`).
    path_segments: Option<Regex>,
}

/// `\bNAME\b` for several names, longest first, case-insensitive.
fn word_pattern(names: &[String]) -> Option<Regex> {
    // Word edges by hand: `\b` fails next to a name that ends in a dot or a space.
    names_pattern(names, "^|[^A-Za-z0-9_.-]", "[^A-Za-z0-9_-]|$")
}

/// A user name also inside longer names (`alice_portrait_v3.safetensors`, `alice-renders`):
/// only letters and digits continue a name.
fn name_pattern(names: &[String]) -> Option<Regex> {
    names_pattern(names, "^|[^A-Za-z0-9]", "[^A-Za-z0-9]|$")
}

/// Any of `names` as a whole segment of a path: a separator on each side.
fn segment_pattern(names: &[String]) -> Option<Regex> {
    names_pattern(names, r"[/\\]", r"[/\\]")
}

/// Any of `names` (longest first, case-insensitive) between what may come `before` and
/// `after` it (regex alternatives).
fn names_pattern(names: &[String], before: &str, after: &str) -> Option<Regex> {
    if names.is_empty() {
        return None;
    }
    let mut names: Vec<&String> = names.iter().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let alts: Vec<String> = names.iter().map(|n| regex::escape(n)).collect();
    Regex::new(&format!(
        r"(?i)(?P<pre>{before})(?P<name>{})(?P<post>{after})",
        alts.join("|")
    ))
    .ok()
}

/// Takes a URL apart: user info, the values of query keys that look secret or random, long
/// random path segments and local host names go; the rest stays readable.
fn redact_url(url: &str, tally: &mut Redactions) -> String {
    // Trailing punctuation belongs to the sentence, not the URL.
    let mut end = url.trim_end_matches(['.', ',', ';', ':', '!', '?']).len();
    if url[..end].ends_with(')') && !url[..end].contains('(') {
        end -= 1;
    }
    let (url, tail) = url.split_at(end);
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("{url}{tail}");
    };
    let (before_frag, frag) = match rest.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (rest, None),
    };
    let (before_query, query) = match before_frag.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (before_frag, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => before_query.split_at(i),
        None => (before_query, ""),
    };
    let mut out = format!("{scheme}://");
    let host_port = match authority.rsplit_once('@') {
        Some((info, hp)) => {
            if info != "[credentials]" {
                bump(tally, Kind::UrlCredentials);
            }
            out.push_str("[credentials]@");
            hp
        }
        None => authority,
    };
    out.push_str(host_port);
    let parts: Vec<&str> = path.split('/').collect();
    let segments: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, seg)| {
            // A file name (`realisticVisionV60B1_v51HyperVAE.safetensors`) or the id after
            // `commit/`, `blob/`, `tree/`, `resolve/` is evidence, not a secret.
            let file = seg.rsplit_once('.').is_some_and(|(_, ext)| {
                (2..=12).contains(&ext.len()) && ext.chars().all(|c| c.is_ascii_alphanumeric())
            });
            let revision = i > 0
                && matches!(
                    parts[i - 1],
                    "commit" | "commits" | "blob" | "tree" | "resolve" | "raw"
                );
            if !file && !revision && random_looking(seg, 24) {
                bump(tally, Kind::Token);
                "[token]".to_string()
            } else {
                seg.to_string()
            }
        })
        .collect();
    out.push_str(&segments.join("/"));
    if let Some(q) = query {
        out.push('?');
        let parts: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !v.is_empty() && !harmless_value(v) => {
                    if is_secret_name(k) || query_secret(k) || random_looking(v, 16) {
                        bump(tally, Kind::SecretValue);
                        format!("{k}={REDACTED}")
                    } else {
                        kv.to_string()
                    }
                }
                _ => kv.to_string(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    if let Some(f) = frag {
        out.push('#');
        if random_looking(f, 16) || f.contains("token") {
            bump(tally, Kind::SecretValue);
            out.push_str(REDACTED);
        } else {
            out.push_str(f);
        }
    }
    out.push_str(tail);
    out
}

/// Query keys that carry credentials in URLs though they say little by themselves.
fn query_secret(key: &str) -> bool {
    matches!(
        key.to_ascii_lowercase().as_str(),
        "key" | "sig" | "session" | "code" | "st" | "se" | "sv" | "hmac" | "expires"
    ) || words(key)
        .iter()
        .any(|w| matches!(w.as_str(), "signature" | "credential" | "sig"))
}

/// A value that looks generated rather than written: at least `min` characters of letters,
/// digits and `-_.~+/=`, with both letters and digits, and a long run without a separator.
fn random_looking(v: &str, min: usize) -> bool {
    let v = v.trim();
    if v.len() < min
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~+/=%".contains(c))
    {
        return false;
    }
    let digits = v.chars().filter(char::is_ascii_digit).count();
    let letters = v.chars().filter(char::is_ascii_alphabetic).count();
    if digits == 0 || letters == 0 {
        return false;
    }
    // File names and slugs (`flux1-dev-fp8.safetensors`) are words joined by separators:
    // a generated value has long runs without one.
    let longest_run = v
        .split(|c: char| "-_./".contains(c))
        .map(str::len)
        .max()
        .unwrap_or(0);
    longest_run >= min.min(16)
}

impl Redactor {
    pub fn new(identity: &Identity) -> Redactor {
        let mut homes = Vec::new();
        for h in &identity.homes {
            // The path as written, with forward slashes, and JSON-escaped.
            let mut forms = vec![h.clone(), h.replace('\\', "/"), h.replace('\\', "\\\\")];
            forms.sort();
            forms.dedup();
            forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
            let alts: Vec<String> = forms.iter().map(|f| regex::escape(f)).collect();
            if let Ok(re) = Regex::new(&format!(
                r#"(?m)(?P<pre>^|[^A-Za-z0-9_.-])(?:{})(?P<post>[/\\"'\s:;,)\]]|$)"#,
                alts.join("|")
            )) {
                homes.push(re);
            }
        }
        // A name of five characters or more is removed inside longer names too
        // (`alice_portrait_v3`); a short one only where it stands alone, or `max` would turn
        // `max_split_size_mb` into `[user]_split_size_mb`.
        let (words, names): (Vec<String>, Vec<String>) = identity
            .users
            .iter()
            .cloned()
            .partition(|u| is_vocabulary_word(u));
        let (long, short): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|u| u.chars().count() >= 5);
        Redactor {
            homes,
            users: name_pattern(&long),
            short_users: word_pattern(&short),
            hosts: word_pattern(&identity.hosts),
            path_segments: segment_pattern(&words),
            in_paths_only: words,
        }
    }

    /// User names redacted in paths only, being words of ComfyUI's code and logs ("model"):
    /// the user is told to look for them elsewhere before filing.
    pub fn names_in_paths_only(&self) -> &[String] {
        &self.in_paths_only
    }

    /// Redacts one text, counting into `tally`.
    pub fn text(&self, s: &str, tally: &mut Redactions) -> String {
        let r = rules();
        let out = self.secrets(s, tally);
        let out = self.places(&out, tally);
        let out = self.people(&out, tally);
        let out = redact_ipv4(&r.ipv4, &out, tally);
        redact_ipv6(&r.ipv6, &out, tally)
    }

    /// Private keys, URLs taken apart, credentials, bearer and other tokens, values of secret-named keys and flags.
    fn secrets(&self, s: &str, tally: &mut Redactions) -> String {
        let r = rules();
        let mut out = s.to_string();
        for re in [&r.pem, &r.pem_open] {
            out = redact(re, &out, Kind::PrivateKey, never, tally, |c| {
                format!("[{}private key]", c[1].to_ascii_lowercase())
            });
        }
        out = replace(&r.url, &out, |c, t| redact_url(&c[0], t), tally);
        out = redact(
            &r.url_credentials,
            &out,
            Kind::UrlCredentials,
            never,
            tally,
            |c| format!("{}[credentials]@", &c[1]),
        );
        out = redact(&r.bearer, &out, Kind::Bearer, never, tally, |c| {
            format!("{}{}[token]", &c[1], &c[2])
        });
        out = redact_aws_secrets(r, &out, tally);
        for re in r.tokens.iter().chain([&r.hex32]) {
            out = replace_as(re, &out, Kind::Token, "[token]", tally);
        }
        // `https://…` is a URL, already taken apart above, not `https: value`.
        let harmless_assignment = |c: &Captures| {
            let val = &c["val"];
            !is_secret_name(&c["key"]) || harmless_value(val) || val.starts_with("//")
        };
        out = redact(
            &r.assignment,
            &out,
            Kind::SecretValue,
            harmless_assignment,
            tally,
            |c| {
                let quote = match c["val"].chars().next() {
                    Some(q @ ('"' | '\'')) => q.to_string(),
                    _ => String::new(),
                };
                format!(
                    "{}{}{}{}{quote}{REDACTED}{quote}",
                    &c["key"],
                    &c["q"],
                    &c["sep"],
                    c.name("scheme").map(|m| m.as_str()).unwrap_or("")
                )
            },
        );
        let harmless_flag = |c: &Captures| !is_secret_name(&c["key"]) || harmless_value(&c["val"]);
        out = redact(
            &r.flag_value,
            &out,
            Kind::SecretValue,
            harmless_flag,
            tally,
            |c| format!("{}{}{}{REDACTED}", &c["pre"], &c["flag"], &c["sp"]),
        );
        out
    }

    /// Host names only a local network knows, cookies, secret query strings, e-mail addresses.
    fn places(&self, s: &str, tally: &mut Redactions) -> String {
        let r = rules();
        let mut out = s.to_string();
        // `google.protobuf.internal`, `Path.home`: Python names, not hosts. These two
        // suffixes count only on a name with a hyphen or a digit in it.
        let python_name = |c: &Captures| {
            let (host, tld) = (&c["host"], c["tld"].to_ascii_lowercase());
            let plain_words = !host[..host.len() - tld.len()]
                .chars()
                .any(|ch| ch == '-' || ch.is_ascii_digit());
            (tld == "internal" || tld == "home") && plain_words
        };
        out = redact(
            &r.local_host,
            &out,
            Kind::HostName,
            python_name,
            tally,
            |c| format!("{}[host]{}", &c["pre"], &c["post"]),
        );
        // Every pair of a cookie header, not only the first.
        let harmless_cookie = |c: &Captures| harmless_value(&c["val"]);
        out = redact(
            &r.cookie,
            &out,
            Kind::SecretValue,
            harmless_cookie,
            tally,
            |c| format!("{}{REDACTED}", &c["key"]),
        );
        // A query string without its scheme (`… with url: /path?X-Amz-Signature=…`).
        let harmless_query = |c: &Captures| {
            let (k, v) = (&c["k"], &c["v"]);
            harmless_value(v) || !(is_secret_name(k) || query_secret(k) || random_looking(v, 16))
        };
        out = redact(
            &r.bare_query,
            &out,
            Kind::SecretValue,
            harmless_query,
            tally,
            |c| format!("{}{}={REDACTED}", &c["sep"], &c["k"]),
        );
        out = replace_as(&r.email, &out, Kind::Email, "[email]", tally);
        out
    }

    /// Home folders and user names in every path form, then this machine's host and user names wherever they stand.
    fn people(&self, s: &str, tally: &mut Redactions) -> String {
        let r = rules();
        let mut out = s.to_string();
        for re in &self.homes {
            out = redact(re, &out, Kind::HomePath, never, tally, |c| {
                format!("{}~{}", &c["pre"], &c["post"])
            });
        }
        let nobody = |c: &Captures| generic(c["name"].trim());
        out = redact(&r.win_user, &out, Kind::HomePath, nobody, tally, |c| {
            format!("{}[user]{}", &c["pre"], &c["sep"])
        });
        let nobody_or_shared =
            |c: &Captures| generic(&c["name"]) || c["name"].eq_ignore_ascii_case("Shared");
        for re in [&r.unix_home, &r.mac_user] {
            out = redact(re, &out, Kind::HomePath, nobody_or_shared, tally, |c| {
                format!("{}[user]", &c["pre"])
            });
        }
        out = replace_as(
            &r.mac_temp,
            &out,
            Kind::HomePath,
            "/var/folders/[temp]/",
            tally,
        );
        // A name that is also a word of ComfyUI's: where it is a whole path segment.
        if let Some(re) = &self.path_segments {
            out = replace_words(re, &out, Kind::UserName, "[user]", tally);
        }
        // Host names first: `alice-desktop` is the host, not the user `alice` and a suffix.
        for (re, kind, placeholder) in [
            (&self.hosts, Kind::HostName, "[host]"),
            (&self.users, Kind::UserName, "[user]"),
            (&self.short_users, Kind::UserName, "[user]"),
        ] {
            if let Some(re) = re {
                out = replace_words(re, &out, kind, placeholder, tally);
            }
        }
        out
    }

    /// Redacts a JSON document in place: secret-named keys and `current_inputs` by structure,
    /// `env` lists by the allowlist, every other string (and key) as text.
    pub fn json(&self, v: &mut Value, tally: &mut Redactions) {
        match v {
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    let key = self.text(&k, tally);
                    if k == "current_inputs" && !val.is_null() {
                        bump(tally, Kind::ErrorInputs);
                        val = Value::String(INPUTS_REMOVED.into());
                    } else if is_secret_name(&k) {
                        redact_scalars(&mut val, tally);
                    } else if k == "env" {
                        self.env(&mut val, tally);
                    } else {
                        self.json(&mut val, tally);
                    }
                    map.insert(key, val);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.json(item, tally);
                }
            }
            Value::String(s) => {
                let red = self.text(s, tally);
                if red != *s {
                    *s = red;
                }
            }
            _ => {}
        }
    }

    /// An environment as `[[name, value], …]` or `{name: value}`: values of names outside the
    /// allowlist are removed.
    fn env(&self, v: &mut Value, tally: &mut Redactions) {
        let one = |name: &str, value: &mut Value, tally: &mut Redactions| {
            if env_allowed(name) {
                self.json(value, tally);
            } else if !value.is_null() {
                bump(tally, Kind::EnvVar);
                *value = Value::String(REDACTED.into());
            }
        };
        match v {
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::Array(pair) if pair.len() == 2 && pair[0].is_string() => {
                            let name = pair[0].as_str().unwrap_or_default().to_string();
                            one(&name, &mut pair[1], tally);
                        }
                        other => self.json(other, tally),
                    }
                }
            }
            // Only a map of variable names: `{"value": …, "source": …}` is not an environment.
            Value::Object(map) if map.keys().all(|k| looks_like_env_name(k)) => {
                for (k, val) in map.iter_mut() {
                    one(k, val, tally);
                }
            }
            other => self.json(other, tally),
        }
    }
}

/// `CUDA_VISIBLE_DEVICES`, `Path`: a letter or underscore, then letters, digits, underscores,
/// with at least one capital (a JSON field like `value` is not a variable).
fn looks_like_env_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && k.chars().any(|c| c.is_ascii_uppercase())
}

/// Every scalar under a secret-named key becomes `[redacted]` (small numbers and booleans
/// stay: `token_count: 77` is no secret).
fn redact_scalars(v: &mut Value, tally: &mut Redactions) {
    match v {
        Value::String(s) if !harmless_value(s) => {
            bump(tally, Kind::SecretValue);
            *s = REDACTED.into();
        }
        Value::Number(n) if !harmless_value(&n.to_string()) => {
            bump(tally, Kind::SecretValue);
            *v = Value::String(REDACTED.into());
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact_scalars(i, tally)),
        Value::Object(map) => map.values_mut().for_each(|i| redact_scalars(i, tally)),
        _ => {}
    }
}

/// `Regex::replace_all` with a counting closure.
/// An AWS access key id (`AKIA…`, `ASIA…` and the other kinds).
const AWS_KEY_ID: &str = r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b";

/// AWS secret access keys on lines that name an access key id (`credentials AKIA… / q7Xz…`):
/// the id alone is caught by its prefix, the secret beside it by its company. A run of hex
/// digits (a commit id) is left alone.
fn redact_aws_secrets(r: &Rules, s: &str, tally: &mut Redactions) -> String {
    if !r.aws_key_id.is_match(s) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    for line in s.split_inclusive('\n') {
        if !r.aws_key_id.is_match(line) {
            out.push_str(line);
            continue;
        }
        let commit_id = |c: &Captures| c["s"].chars().all(|ch| ch.is_ascii_hexdigit());
        out.push_str(&redact(
            &r.aws_secret,
            line,
            Kind::Token,
            commit_id,
            tally,
            |c| format!("{}[token]{}", &c["pre"], &c["post"]),
        ));
    }
    out
}

fn replace(
    re: &Regex,
    s: &str,
    mut f: impl FnMut(&Captures, &mut Redactions) -> String,
    tally: &mut Redactions,
) -> String {
    if !re.is_match(s) {
        return s.to_string();
    }
    re.replace_all(s, |c: &Captures| f(c, tally)).into_owned()
}

/// Replaces every match with `with`, counting each as `kind`.
fn replace_as(re: &Regex, s: &str, kind: Kind, with: &str, tally: &mut Redactions) -> String {
    redact(re, s, kind, never, tally, |_| with.to_string())
}

/// Replaces each match with what `with` makes of it, counting each as `kind`, but for those
/// `spare` leaves as they are.
fn redact(
    re: &Regex,
    s: &str,
    kind: Kind,
    spare: impl Fn(&Captures) -> bool,
    tally: &mut Redactions,
    with: impl Fn(&Captures) -> String,
) -> String {
    replace(
        re,
        s,
        |c, t| {
            if spare(c) {
                return c[0].to_string();
            }
            bump(t, kind);
            with(c)
        },
        tally,
    )
}

/// Spares no match.
fn never(_: &Captures) -> bool {
    false
}

/// Replaces whole-word names; repeated because a shared edge character between two
/// neighbouring matches is consumed by the first.
fn replace_words(
    re: &Regex,
    s: &str,
    kind: Kind,
    placeholder: &str,
    tally: &mut Redactions,
) -> String {
    let mut out = s.to_string();
    for _ in 0..4 {
        if !re.is_match(&out) {
            break;
        }
        out = re
            .replace_all(&out, |c: &Captures| {
                bump(tally, kind);
                format!("{}{placeholder}{}", &c["pre"], &c["post"])
            })
            .into_owned();
    }
    out
}

/// IPv4 addresses other than loopback and `0.0.0.0`, and not parts of version numbers
/// (`nvidia-cudnn-cu12==9.1.0.70`, `v1.2.3.4`, `1.2.3.4.5`).
fn redact_ipv4(re: &Regex, s: &str, tally: &mut Redactions) -> String {
    if !re.is_match(s) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for m in re.find_iter(s) {
        let before = s[..m.start()].chars().next_back();
        let after: Vec<char> = s[m.end()..].chars().take(2).collect();
        // `pkg==9.1.0.70` is a version; `--listen=192.168.1.5` an address.
        let before2 = s[..m.start()].chars().rev().nth(1);
        let assigned = before == Some('=') && before2.is_some_and(|c| c != '=');
        let versionish = (!assigned
            && before.is_some_and(|c| c.is_alphabetic() || "=.-_+".contains(c)))
            || (after.first() == Some(&'.') && after.get(1).is_some_and(|c| c.is_ascii_digit()))
            || after.first().is_some_and(|c| *c == '-' || *c == '+');
        let ip: Option<std::net::Ipv4Addr> = m.as_str().parse().ok();
        let keep = versionish
            || match ip {
                None => true,
                Some(ip) => ip.is_loopback() || ip.is_unspecified() || ip.is_broadcast(),
            };
        if keep {
            continue;
        }
        out.push_str(&s[last..m.start()]);
        out.push_str("[ip]");
        bump(tally, Kind::IpAddress);
        last = m.end();
    }
    out.push_str(&s[last..]);
    out
}

/// IPv6 addresses with at least three groups, other than `::1` and `::` (so `a::b` in C++
/// names and `12:34:56` times stay).
fn redact_ipv6(re: &Regex, s: &str, tally: &mut Redactions) -> String {
    if !s.contains(':') || !re.is_match(s) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for m in re.find_iter(s) {
        let text = m.as_str();
        let before = s[..m.start()].chars().next_back();
        let after = s[m.end()..].chars().next();
        let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.');
        let groups = text.split(':').filter(|g| !g.is_empty()).count();
        let ok = !edge(before)
            && !edge(after)
            && groups >= 3
            && text
                .parse::<std::net::Ipv6Addr>()
                .is_ok_and(|ip| !ip.is_loopback() && !ip.is_unspecified());
        if !ok {
            continue;
        }
        out.push_str(&s[last..m.start()]);
        out.push_str("[ip]");
        bump(tally, Kind::IpAddress);
        last = m.end();
    }
    out.push_str(&s[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Redactor {
        let mut id = Identity::default();
        id.add_home("/home/alice");
        id.add_user("alice");
        id.add_host("alice-desktop.lan");
        Redactor::new(&id)
    }

    fn red(r: &Redactor, s: &str) -> (String, Redactions) {
        let mut t = Redactions::new();
        let out = r.text(s, &mut t);
        (out, t)
    }

    #[test]
    fn text_rules() {
        let r = alice();
        // (input, expected output, kind counted)
        let cases: &[(&str, &str, Option<Kind>)] = &[
            (
                r#"  File "/home/alice/ComfyUI/execution.py", line 496"#,
                r#"  File "~/ComfyUI/execution.py", line 496"#,
                Some(Kind::HomePath),
            ),
            (
                "/home/bob/ComfyUI/models",
                "/home/[user]/ComfyUI/models",
                Some(Kind::HomePath),
            ),
            (
                "/var/home/carol/x",
                "/var/home/[user]/x",
                Some(Kind::HomePath),
            ),
            (
                r"C:\Users\Alice Smith\Documents\ComfyUI\main.py",
                r"C:\Users\[user]\Documents\ComfyUI\main.py",
                Some(Kind::HomePath),
            ),
            (
                r"D:\\Users\\Bob Jones\\ComfyUI_windows_portable\\ComfyUI",
                r"D:\\Users\\[user]\\ComfyUI_windows_portable\\ComfyUI",
                Some(Kind::HomePath),
            ),
            (
                "c:/users/dave/ComfyUI",
                "c:/users/[user]/ComfyUI",
                Some(Kind::HomePath),
            ),
            (
                r"C:\Documents and Settings\eve\x",
                r"C:\Documents and Settings\[user]\x",
                Some(Kind::HomePath),
            ),
            (r"C:\Users\Public\x", r"C:\Users\Public\x", None),
            (
                "/Users/frank/ComfyUI",
                "/Users/[user]/ComfyUI",
                Some(Kind::HomePath),
            ),
            (
                "/mnt/c/Users/gina/ComfyUI",
                "/mnt/c/Users/[user]/ComfyUI",
                Some(Kind::HomePath),
            ),
            (
                "/private/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/x",
                "/private/var/folders/[temp]/T/x",
                Some(Kind::HomePath),
            ),
            (
                "logged in as alice on alice-desktop",
                "logged in as [user] on [host]",
                Some(Kind::UserName),
            ),
            (
                "mail alice@example.com now",
                "mail [email] now",
                Some(Kind::Email),
            ),
            (
                "connect 203.0.113.7:8188 and 10.0.0.2",
                "connect [ip]:8188 and [ip]",
                Some(Kind::IpAddress),
            ),
            (
                "To see the GUI go to: http://127.0.0.1:8188",
                "To see the GUI go to: http://127.0.0.1:8188",
                None,
            ),
            ("listen 0.0.0.0", "listen 0.0.0.0", None),
            (
                "GET http://198.51.100.20:8188/prompt",
                "GET http://[ip]:8188/prompt",
                Some(Kind::IpAddress),
            ),
            (
                "nvidia-cudnn-cu12==9.1.0.70 and v1.2.3.4 and 1.2.3.4.5",
                "nvidia-cudnn-cu12==9.1.0.70 and v1.2.3.4 and 1.2.3.4.5",
                None,
            ),
            (
                "peer fe80::1ff:fe23:4567:890a up",
                "peer [ip] up",
                Some(Kind::IpAddress),
            ),
            (
                "[defaultAllocator.cpp::allocate::19] at 12:34:56 ::1",
                "[defaultAllocator.cpp::allocate::19] at 12:34:56 ::1",
                None,
            ),
            (
                "token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
                "token [token]",
                Some(Kind::Token),
            ),
            (
                "key sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOp",
                "key [token]",
                Some(Kind::Token),
            ),
            (
                "ghp_0123456789abcdefghijABCDEFGHIJ012345 github_pat_11ABCDEFG0123456789_abcdefghij",
                "[token] [token]",
                Some(Kind::Token),
            ),
            ("id AKIAIOSFODNN7EXAMPLE", "id [token]", Some(Kind::Token)),
            (
                "credentials AKIAIOSFODNN7EXAMPLE / q7XzJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLE",
                "credentials [token] / [token]",
                Some(Kind::Token),
            ),
            (
                "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "[token]:[token]",
                Some(Kind::Token),
            ),
            (
                "commit 3f786850e387550fdab836ed7e6dc881de23001b for AKIAIOSFODNN7EXAMPLE",
                "commit 3f786850e387550fdab836ed7e6dc881de23001b for [token]",
                Some(Kind::Token),
            ),
            (
                "Authorization: Bearer eyJhbGciOi.abc.def123456",
                "Authorization: Bearer [token]",
                Some(Kind::Bearer),
            ),
            (
                "Authorization: Basic dXNlcjpwYXNzd29yZA==",
                "Authorization: Basic [redacted]",
                Some(Kind::SecretValue),
            ),
            (
                "git clone https://bob:s3cr3t@example.com/repo.git",
                "git clone https://[credentials]@example.com/repo.git",
                Some(Kind::UrlCredentials),
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "aws_secret_access_key = [redacted]",
                Some(Kind::SecretValue),
            ),
            (
                r#"{'api_key': 'comfyui-1234567890', "password": "hunter2 x"}"#,
                r#"{'api_key': '[redacted]', "password": "[redacted]"}"#,
                Some(Kind::SecretValue),
            ),
            (
                "--api-key=abcdef123",
                "--api-key=[redacted]",
                Some(Kind::SecretValue),
            ),
            (
                "max_tokens: 512 tokenizer: t5xxl author: me auth: None token_count=77",
                "max_tokens: 512 tokenizer: t5xxl author: me auth: None token_count=77",
                None,
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
                "[rsa private key]",
                Some(Kind::PrivateKey),
            ),
            (
                "Requested to load SD1 with root logger on user settings",
                "Requested to load SD1 with root logger on user settings",
                None,
            ),
        ];
        for (input, want, kind) in cases {
            let (got, tally) = red(&r, input);
            assert_eq!(&got, want, "{input}");
            match kind {
                Some(k) => assert!(tally.contains_key(k), "{input}: {tally:?}"),
                None => assert!(tally.is_empty(), "{input}: {tally:?}"),
            }
            // Idempotent: a second pass finds nothing.
            let (again, tally) = red(&r, &got);
            assert_eq!(again, got);
            assert!(tally.is_empty(), "{got}: {tally:?}");
        }
    }

    #[test]
    fn secret_names_by_word() {
        for k in [
            "api_key",
            "apiKey",
            "API_KEY",
            "api_key_comfy_org",
            "HF_TOKEN",
            "access_token",
            "password",
            "db_passwd",
            "client_secret",
            "AWS_SECRET_ACCESS_KEY",
            "aws_access_key_id",
            "Authorization",
            "x-auth",
            "private_key",
            "mysql_pwd",
            "session_cookie",
        ] {
            assert!(is_secret_name(k), "{k}");
        }
        for k in [
            "max_tokens",
            "tokenizer",
            "author",
            "seed",
            "ckpt_name",
            "keyframes",
            "text",
            "passthrough",
            "CUDA_VISIBLE_DEVICES",
        ] {
            assert!(!is_secret_name(k), "{k}");
        }
    }

    #[test]
    fn json_structure() {
        let r = alice();
        let mut v = serde_json::json!({
            "prompt": {"3": {"inputs": {"api_key": "ck-abcdef0123", "seed": 42, "max_tokens": 77,
                                         "text": "a photo by alice@example.com"}}},
            "extra_data": {"api_key_comfy_org": "comfyui-0123456789abcdef", "client_id": "c1"},
            "credentials": {"user": "bob", "pass": "s3cr3t-pass"},
            "current_inputs": {"prompt": ["{...}"]},
            "env": [["CUDA_VISIBLE_DEVICES", "0"], ["MY_SETTING", "private"], ["HF_TOKEN", "hf_x"]],
            "other": {"env": {"value": {"CUDA_VISIBLE_DEVICES": "0"}, "source": "here"}},
            "path": "C:\\Users\\Alice Smith\\ComfyUI",
            "/home/alice/key": 1
        });
        let mut t = Redactions::new();
        r.json(&mut v, &mut t);
        let inputs = &v["prompt"]["3"]["inputs"];
        assert_eq!(inputs["api_key"], REDACTED);
        assert_eq!(inputs["seed"], 42);
        assert_eq!(inputs["max_tokens"], 77);
        assert_eq!(inputs["text"], "a photo by [email]");
        assert_eq!(v["extra_data"]["api_key_comfy_org"], REDACTED);
        assert_eq!(v["extra_data"]["client_id"], "c1");
        assert_eq!(v["credentials"]["user"], REDACTED);
        assert_eq!(v["current_inputs"], INPUTS_REMOVED);
        assert_eq!(
            v["env"],
            serde_json::json!([
                ["CUDA_VISIBLE_DEVICES", "0"],
                ["MY_SETTING", REDACTED],
                ["HF_TOKEN", REDACTED]
            ])
        );
        assert_eq!(v["path"], "C:\\Users\\[user]\\ComfyUI");
        assert_eq!(v["other"]["env"]["source"], "here");
        assert_eq!(v["~/key"], 1);
        assert_eq!(t[&Kind::SecretValue], 4);
        assert_eq!(t[&Kind::EnvVar], 2);
        assert_eq!(t[&Kind::ErrorInputs], 1);
        // The serialised form has the JSON-escaped Windows path redacted too.
        let text = serde_json::to_string(&v).unwrap();
        assert!(!text.contains("Alice") && !text.contains("alice"), "{text}");
    }

    #[test]
    fn a_user_name_that_is_a_word_of_comfyui_goes_from_paths_only() {
        let mut id = Identity::default();
        id.add_home("/home/model");
        id.add_user("model");
        let r = Redactor::new(&id);
        let line = "  File \"/home/model/ComfyUI/comfy/model_management.py\", line 527, in load_models_gpu\n    comfy.model_management.load_models_gpu([model] + models)";
        let (out, t) = red(&r, line);
        assert_eq!(
            out,
            "  File \"~/ComfyUI/comfy/model_management.py\", line 527, in load_models_gpu\n    comfy.model_management.load_models_gpu([model] + models)"
        );
        assert_eq!(t.get(&Kind::UserName), None);
        assert_eq!(r.names_in_paths_only(), ["model"]);
        // A whole segment of any path goes: another drive, a mount, a repository's owner.
        for (text, want) in [
            (
                "/media/model/disk/ComfyUI/main.py",
                "/media/[user]/disk/ComfyUI/main.py",
            ),
            (r"D:\model\ComfyUI\main.py", r"D:\[user]\ComfyUI\main.py"),
            (
                "https://github.com/Model/nodes/",
                "https://github.com/[user]/nodes/",
            ),
            // As a word, or the end of a path, it stays.
            ("model", "model"),
            ("load model/", "load model/"),
            (
                "checkpoints/model.safetensors",
                "checkpoints/model.safetensors",
            ),
        ] {
            assert_eq!(red(&r, text).0, want, "{text}");
        }
        assert!(is_vocabulary_word("Model") && !is_vocabulary_word("marta"));
    }

    #[test]
    fn identity_learns_names_from_paths() {
        let mut id = Identity::default();
        id.learn(r#"File "C:\\Users\\Zoë Quinn\\ComfyUI\\main.py" and /home/ubuntu/x and /Users/marco/y"#);
        // Each word of a name of several too: a prompt or a file name may hold one alone.
        assert_eq!(id.users, ["Zoë Quinn", "Zoë", "Quinn", "marco"]);
        let r = Redactor::new(&id);
        let (out, t) = red(&r, "owner: Zoë Quinn; by marco.");
        assert_eq!(out, "owner: [user]; by [user].");
        assert_eq!(t[&Kind::UserName], 2);
        // Windows homes in all three written forms become `~`.
        let mut id = Identity::default();
        id.add_home(r"C:\Users\Alice Smith");
        let r = Redactor::new(&id);
        for (input, want) in [
            (r"C:\Users\Alice Smith\ComfyUI", r"~\ComfyUI"),
            ("C:/Users/Alice Smith/ComfyUI", "~/ComfyUI"),
            (r#""C:\\Users\\Alice Smith\\ComfyUI""#, r#""~\\ComfyUI""#),
        ] {
            assert_eq!(red(&r, input).0, want);
        }
        // Short, generic and numeric names are not learnt.
        let mut id = Identity::default();
        id.add_user("vm");
        id.add_user("root");
        id.add_host("localhost");
        id.add_host("10.0.0.1");
        assert!(id.users.is_empty() && id.hosts.is_empty());
    }

    #[test]
    fn env_allowlist() {
        assert!(env_allowed("CUDA_VISIBLE_DEVICES"));
        assert!(env_allowed("pytorch_cuda_alloc_conf"));
        assert!(!env_allowed("HF_TOKEN"));
        assert!(!env_allowed("PATH"));
    }
}

/// Secrets and personal data of every kind, as users have them in logs, command lines and
/// workflows (`fixtures/redaction/planted.json`, with `{user}`, `{full_name}` and `{host}`
/// standing for the machine's names); none may survive. `tests/report_cli.rs` plants each in
/// every kind of file a bundle holds.
#[cfg(test)]
mod planted {
    #[test]
    fn nothing_planted_survives_the_text_rules() {
        let planted: serde_json::Value =
            serde_json::from_str(include_str!("../../fixtures/redaction/planted.json")).unwrap();
        let mut id = super::Identity::default();
        id.add_home("/home/alice");
        id.add_user("alice");
        id.add_home(r"C:\Users\Alice Smith");
        id.add_host("alice-desktop.lan");
        let r = super::Redactor::new(&id);
        let fill = |s: &str| {
            s.replace("{user}", "alice")
                .replace("{full_name}", "Alice Smith")
                .replace("{host}", "alice-desktop")
        };
        let mut survived = Vec::new();
        let entries = planted.as_array().unwrap();
        for e in entries {
            let what = e["what"].as_str().unwrap();
            let text = fill(e["text"].as_str().unwrap());
            let secret = fill(e["secret"].as_str().unwrap());
            let mut t = super::Redactions::new();
            let out = r.text(&text, &mut t);
            if out.contains(&secret) {
                survived.push(format!("{what}: {out}"));
            }
            // Redacting twice changes nothing.
            let mut t2 = super::Redactions::new();
            assert_eq!(r.text(&out, &mut t2), out, "{what}");
        }
        assert!(survived.is_empty(), "survived:\n{}", survived.join("\n"));
        assert!(entries.len() >= 40);
    }
}

/// What a maintainer needs must come through: short user names, Python module paths, file
/// names and commit ids in URLs, words that contain a flag's spelling.
#[cfg(test)]
mod evidence {
    #[test]
    fn evidence_survives_and_more_secrets_go() {
        let mut id = super::Identity::default();
        id.add_home("/home/max");
        id.add_user("max");
        let r = super::Redactor::new(&id);
        let red = |s: &str| {
            let mut t = super::Redactions::new();
            r.text(s, &mut t)
        };
        for keep in [
            "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",
            "from google.protobuf.internal import builder",
            "cache = Path.home() / '.cache'",
            "https://civitai.com/api/download/models/realisticVisionV60B1_v51HyperVAE.safetensors",
            "https://github.com/Comfy-Org/ComfyUI/commit/0dcc75ca547b533a129699208aefa95c6742f1b6",
            "Non-token inputs were ignored",
            "--max-upload-size 100",
        ] {
            assert_eq!(red(keep), keep);
        }
        // "max" is a word of ComfyUI's code and logs: it goes from paths only.
        assert_eq!(red("logged in as max"), "logged in as max");
        assert_eq!(red("/home/max/ComfyUI/main.py"), "~/ComfyUI/main.py");
        assert_eq!(red(r"C:\Users\max\ComfyUI"), r"C:\Users\[user]\ComfyUI");
        assert_eq!(r.names_in_paths_only(), ["max"]);
        // A short user name that is no such word goes where it stands alone, not inside a
        // longer name.
        let mut id = super::Identity::default();
        id.add_user("bob");
        let bob = super::Redactor::new(&id);
        let mut t = super::Redactions::new();
        assert_eq!(
            bob.text("logged in as bob; bob_split_size", &mut t),
            "logged in as [user]; bob_split_size"
        );
        for (text, secret) in [
            (
                "Cookie: a=1; comfy_session=Xy12Ab34Cd; cf_clearance=Zz99Yy88",
                "cf_clearance=Zz99Yy88",
            ),
            (
                "GET failed with url: /v1/x?X-Amz-Signature=9f8e7d6c5b4a3928&X-Amz-Expires=300",
                "9f8e7d6c5b4a3928",
            ),
            (
                "openai_key = plainvalue-not-prefixed",
                "plainvalue-not-prefixed",
            ),
            ("replicate_key: r8_Ab12Cd34Ef56Gh78", "r8_Ab12Cd34Ef56Gh78"),
            ("router at edge-router-2.internal:8080", "edge-router-2"),
        ] {
            let out = red(text);
            assert!(!out.contains(secret), "{secret} survived: {out}");
        }
    }
}
