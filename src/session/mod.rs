//! A session folder, a bisect's or a regress's, and what both searches share.
//!
//! [`SessionDir`] is the one place that names a session's files: code asks it for a file
//! rather than joining a name onto a bare path, and [`file_names`] lists the names for the
//! extension, which reads some of them (its contract test holds the two together).
//! [`journal`] keeps a line per finished run, [`owner`] keeps one process per session,
//! [`failure`] says where and how a run failed, and [`quick`] holds what shortened runs are
//! to both searches. regress reaches `bisect` only to run one (`--then-bisect`).

pub(crate) mod failure;
pub(crate) mod journal;
pub(crate) mod owner;
pub(crate) mod quick;

use std::path::{Path, PathBuf};

/// Which command's session a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bisect,
    Regress,
}

/// A session folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDir {
    root: PathBuf,
    kind: Kind,
}

/// The settings a session was started with (what `--resume` reads back).
const BISECT_SPEC: &str = "session.json";
const REGRESS_SPEC: &str = "regress.json";
/// One line per finished run (bisect) or tested commit (regress).
const BISECT_JOURNAL: &str = "journal.jsonl";
const REGRESS_JOURNAL: &str = "regress.jsonl";
/// The answer, once there is one.
const RESULT: &str = "result.json";
/// Where a running bisect stands (what the extension's panel shows).
const PROGRESS: &str = "progress.json";
/// The runs, one folder each (`runs/001`).
const RUNS: &str = "runs";
/// The lock one process holds while it writes the session (never written, only locked), and
/// that process's id while it holds it ([`owner`]).
const LOCK: &str = "session.lock";
const OWNER: &str = "session.owner";
/// In a regress session: the bisect of the first bad commit's flags, and that commit's tree
/// while it runs.
const THEN_BISECT: &str = "bisect";
const FIRST_BAD_TREE: &str = "first-bad";
/// In a regress session: the trees of the commits it tests, while it runs.
const TREES: &str = "trees";

impl SessionDir {
    /// A bisect's session folder.
    pub fn bisect(root: impl Into<PathBuf>) -> SessionDir {
        SessionDir {
            root: root.into(),
            kind: Kind::Bisect,
        }
    }

    /// A regress's session folder.
    pub fn regress(root: impl Into<PathBuf>) -> SessionDir {
        SessionDir {
            root: root.into(),
            kind: Kind::Regress,
        }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The settings the session was started with.
    pub fn spec(&self) -> PathBuf {
        self.root.join(match self.kind {
            Kind::Bisect => BISECT_SPEC,
            Kind::Regress => REGRESS_SPEC,
        })
    }

    /// The journal: one line per finished run or tested commit.
    pub fn journal(&self) -> PathBuf {
        self.root.join(match self.kind {
            Kind::Bisect => BISECT_JOURNAL,
            Kind::Regress => REGRESS_JOURNAL,
        })
    }

    /// The answer.
    pub fn result(&self) -> PathBuf {
        self.root.join(RESULT)
    }

    /// Where a running bisect stands.
    pub fn progress(&self) -> PathBuf {
        self.root.join(PROGRESS)
    }

    /// The folder of the runs.
    pub fn runs(&self) -> PathBuf {
        self.root.join(RUNS)
    }

    /// The folder of run `n` (`runs/007`).
    pub fn run(&self, n: u32) -> PathBuf {
        self.runs().join(format!("{n:03}"))
    }

    /// A regress session's bisect of the first bad commit's flags (`--then-bisect`).
    pub fn then_bisect(&self) -> SessionDir {
        SessionDir::bisect(self.root.join(THEN_BISECT))
    }

    /// Where a regress session exports the first bad commit's tree while its bisect runs.
    pub fn first_bad_tree(&self) -> PathBuf {
        self.root.join(FIRST_BAD_TREE)
    }

    /// Where a regress session checks out the commits it tests, while it runs.
    pub fn trees(&self) -> PathBuf {
        self.root.join(TREES)
    }
}

/// The names of a session folder's files, by what they are, for what reads them from
/// outside the program (the extension): `{"bisect": {"spec": "session.json", ...}, ...}`.
pub fn file_names() -> serde_json::Value {
    serde_json::json!({
        "bisect": {
            "spec": BISECT_SPEC,
            "journal": BISECT_JOURNAL,
            "result": RESULT,
            "progress": PROGRESS,
            "runs": RUNS,
            "lock": LOCK,
            "owner": OWNER,
        },
        "regress": {
            "spec": REGRESS_SPEC,
            "journal": REGRESS_JOURNAL,
            "result": RESULT,
            "runs": RUNS,
            "lock": LOCK,
            "owner": OWNER,
            "then_bisect": THEN_BISECT,
            "first_bad_tree": FIRST_BAD_TREE,
            "trees": TREES,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_names_its_own_files() {
        let b = SessionDir::bisect("/s");
        assert_eq!(b.spec(), Path::new("/s/session.json"));
        assert_eq!(b.journal(), Path::new("/s/journal.jsonl"));
        assert_eq!(b.run(7), Path::new("/s/runs/007"));
        let r = SessionDir::regress("/r");
        assert_eq!(r.spec(), Path::new("/r/regress.json"));
        assert_eq!(r.journal(), Path::new("/r/regress.jsonl"));
        assert_eq!(r.then_bisect().spec(), Path::new("/r/bisect/session.json"));
        assert_eq!(r.then_bisect().kind(), Kind::Bisect);
        let names = file_names();
        assert_eq!(names["bisect"]["spec"], "session.json");
        assert_eq!(names["bisect"]["progress"], "progress.json");
    }
}
