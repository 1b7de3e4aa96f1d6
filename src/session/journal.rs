//! A session's journal: one JSON line per finished piece of work (a bisect's run, a regress's
//! tested commit), appended and synced to disk before the next one starts, so that a crash or
//! a killed process loses at most the piece under way. A line torn by a crash mid-write is
//! skipped when read back and named, so the user knows what will be redone; the next entry
//! starts on a fresh line instead of being glued to it. `--resume` reads the entries and
//! carries on after the last.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// The journal file of a session, holding entries of type `T`.
#[derive(Debug, Clone)]
pub struct Journal<T> {
    path: PathBuf,
    entries: PhantomData<fn() -> T>,
}

/// A line that could not be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// 1-based line number.
    pub line: usize,
    /// How many entries were read before it.
    pub after: usize,
}

impl<T: Serialize + DeserializeOwned> Journal<T> {
    pub fn at(path: impl Into<PathBuf>) -> Journal<T> {
        Journal {
            path: path.into(),
            entries: PhantomData,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry as one line, synced to disk before it returns. After a torn line,
    /// the entry starts on a fresh line.
    pub fn append(&self, entry: &T) -> std::io::Result<()> {
        let mut f = crate::private::options()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)?;
        let len = f.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1))?;
            f.read_exact(&mut last)?;
            if last[0] != b'\n' {
                f.write_all(b"\n")?;
            }
        }
        let mut line = serde_json::to_string(entry).map_err(std::io::Error::other)?;
        line.push('\n');
        f.write_all(line.as_bytes())?;
        f.sync_data()
    }

    /// Every entry that can be read, in order; a missing journal has none.
    pub fn read(&self) -> Vec<T> {
        self.read_all().0
    }

    /// The entries, and the lines that could not be read.
    pub fn read_all(&self) -> (Vec<T>, Vec<Torn>) {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return (Vec::new(), Vec::new());
        };
        let mut entries = Vec::new();
        let mut torn = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(line) {
                Ok(e) => entries.push(e),
                Err(_) => torn.push(Torn {
                    line: i + 1,
                    after: entries.len(),
                }),
            }
        }
        (entries, torn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct E {
        n: u32,
        what: String,
    }

    fn e(n: u32) -> E {
        E {
            n,
            what: format!("entry {n}"),
        }
    }

    #[test]
    fn a_torn_line_is_skipped_named_and_not_glued_to_the_next() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = Journal::<E>::at(tmp.path().join("journal.jsonl"));
        assert_eq!(
            journal.read(),
            Vec::<E>::new(),
            "no journal yet: no entries"
        );
        journal.append(&e(1)).unwrap();
        journal.append(&e(2)).unwrap();
        // A crash in the middle of writing the third.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(journal.path())
            .unwrap();
        f.write_all(b"{\"n\":3,\"wh").unwrap();
        drop(f);
        let (entries, torn) = journal.read_all();
        assert_eq!(entries, [e(1), e(2)]);
        assert_eq!(torn, [Torn { line: 3, after: 2 }]);
        // The resumed session writes on: the torn line stays apart, nothing is lost.
        journal.append(&e(3)).unwrap();
        journal.append(&e(4)).unwrap();
        let (entries, torn) = journal.read_all();
        assert_eq!(entries, [e(1), e(2), e(3), e(4)]);
        assert_eq!(torn, [Torn { line: 3, after: 2 }]);
        let text = std::fs::read_to_string(journal.path()).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.ends_with('\n'));
    }
}
