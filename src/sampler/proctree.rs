//! Following a process tree: which processes descend from a root pid, and how much memory
//! each holds (on Linux split into anonymous, file-backed, shared and swapped).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Bounds on how often the tree's membership is re-read. Finding it costs a few µs per thread
/// of the tree on Linux (the `children` files), and about 9 µs per process on the machine
/// where every process must be listed (a few ms on a busy desktop): far more than reading the
/// members' memory. So the period adapts to keep it under 0.1% of a core: a search that took
/// 1 ms is repeated every second. A child started between two searches is missed until the
/// next one (at most a quarter of a second for a small tree); ComfyUI rarely starts processes.
pub const RESCAN_MIN: Duration = Duration::from_millis(250);
pub const RESCAN_MAX: Duration = Duration::from_secs(2);
const RESCAN_COST_FACTOR: u32 = 1000;

/// How long to wait before listing again after a listing that took `cost`.
pub fn rescan_period(cost: Duration) -> Duration {
    cost.saturating_mul(RESCAN_COST_FACTOR)
        .clamp(RESCAN_MIN, RESCAN_MAX)
}

/// Memory of one process (or a sum over a tree), in bytes. Fields the platform does not
/// report are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcMem {
    /// Resident set size (`VmRSS`).
    pub rss: u64,
    /// Anonymous resident memory (`RssAnon`): heap, tensors, pinned buffers.
    pub anon: Option<u64>,
    /// File-backed and shared-memory resident memory (`RssFile + RssShmem`, statm's
    /// `shared`): mmap'd safetensors, libraries. The kernel can drop file pages under
    /// pressure, so they look like RAM use but are reclaimable.
    pub file: Option<u64>,
    /// Shared-memory resident memory (`RssShmem`).
    pub shmem: Option<u64>,
    /// Swapped-out anonymous memory (`VmSwap`).
    pub swap: Option<u64>,
}

impl ProcMem {
    /// Adds `other` to a running total; a field stays `None` only if no process reported it.
    pub fn add(&mut self, other: &ProcMem) {
        fn add(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0).saturating_add(b));
            }
        }
        self.rss = self.rss.saturating_add(other.rss);
        add(&mut self.anon, other.anon);
        add(&mut self.file, other.file);
        add(&mut self.shmem, other.shmem);
        add(&mut self.swap, other.swap);
    }
}

/// Every descendant of `root`, and `root` itself if it is listed, sorted.
///
/// `procs` is `(pid, parent pid)` for every process on the machine. Cycles (impossible in a
/// consistent listing, possible in a torn one) do not loop.
pub fn descendants(root: u32, procs: &[(u32, u32)]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut listed = false;
    for &(pid, ppid) in procs {
        listed |= pid == root;
        if pid != ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    if !listed {
        return Vec::new();
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            for &k in kids {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        i += 1;
    }
    out.sort_unstable();
    out
}

/// The parent pid from the text of `/proc/PID/stat`. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Memory figures from the text of `/proc/PID/status` (values in kB, which are KiB).
/// A kernel thread or zombie has no `VmRSS` line: all zero.
pub fn parse_status(status: &str) -> ProcMem {
    let mut m = ProcMem::default();
    for line in status.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let field = match key {
            "VmRSS" => None,
            "RssAnon" => Some(&mut m.anon),
            "RssFile" => Some(&mut m.file),
            "RssShmem" => Some(&mut m.shmem),
            "VmSwap" => Some(&mut m.swap),
            _ => continue,
        };
        let Some(bytes) = crate::text::proc_kib(value) else {
            continue;
        };
        match field {
            None => m.rss = bytes,
            Some(f) => *f = Some(bytes),
        }
    }
    m
}

/// The members of the followed tree, re-listed every [`rescan_period`] and whenever the
/// root changes.
#[derive(Debug, Default)]
pub struct Tree {
    root: Option<u32>,
    members: Vec<u32>,
    next_scan: Option<Instant>,
    lister: Lister,
}

impl Tree {
    pub fn new(root: Option<u32>) -> Tree {
        Tree {
            root,
            ..Tree::default()
        }
    }

    pub fn root(&self) -> Option<u32> {
        self.root
    }

    pub fn set_root(&mut self, pid: u32) {
        if self.root != Some(pid) {
            self.root = Some(pid);
            self.next_scan = None;
        }
    }

    /// Re-lists the members when due; returns them (sorted).
    pub fn refresh(&mut self, now: Instant) -> &[u32] {
        let Some(root) = self.root else {
            return &[];
        };
        if self.next_scan.is_none_or(|t| now >= t) {
            let t = Instant::now();
            self.members = self.lister.tree(root);
            self.next_scan = Some(now + rescan_period(t.elapsed()));
        }
        &self.members
    }

    pub fn members(&self) -> &[u32] {
        &self.members
    }
}

/// Finds the members of a tree.
#[derive(Debug, Default)]
struct Lister {
    #[cfg(target_os = "linux")]
    buf: String,
    #[cfg(not(target_os = "linux"))]
    sys: Option<sysinfo::System>,
}

impl Lister {
    /// The tree under `root`, sorted; empty when `root` is gone.
    fn tree(&mut self, root: u32) -> Vec<u32> {
        #[cfg(target_os = "linux")]
        if let Some(t) = self.tree_from_children_files(root) {
            return t;
        }
        descendants(root, &self.list())
    }

    /// On Linux each thread lists the children it started in `/proc/PID/task/TID/children`:
    /// reading those of the tree's own threads costs far less than listing every process.
    /// `None` when the kernel lacks the files (built without `CONFIG_PROC_CHILDREN`).
    #[cfg(target_os = "linux")]
    fn tree_from_children_files(&mut self, root: u32) -> Option<Vec<u32>> {
        use std::io::Read;
        let probe = format!("/proc/{root}/task/{root}/children");
        if std::fs::metadata(&probe).is_err() {
            // Either the root is gone or the files do not exist: a full listing decides.
            return None;
        }
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() {
            let pid = out[i];
            i += 1;
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let mut path = task.path();
                path.push("children");
                self.buf.clear();
                let Ok(mut f) = std::fs::File::open(&path) else {
                    continue;
                };
                if f.read_to_string(&mut self.buf).is_err() {
                    continue;
                }
                for child in self.buf.split_ascii_whitespace() {
                    if let Ok(c) = child.parse::<u32>()
                        && !out.contains(&c)
                    {
                        out.push(c);
                    }
                }
            }
        }
        out.sort_unstable();
        Some(out)
    }

    /// `(pid, ppid)` of every process on the machine.
    #[cfg(target_os = "linux")]
    fn list(&mut self) -> Vec<(u32, u32)> {
        use std::io::Read;
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return out;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            self.buf.clear();
            let path = format!("/proc/{pid}/stat");
            // A process that exited since the directory was read is simply skipped.
            let Ok(mut f) = std::fs::File::open(&path) else {
                continue;
            };
            if f.read_to_string(&mut self.buf).is_err() {
                continue;
            }
            if let Some(ppid) = parse_stat_ppid(&self.buf) {
                out.push((pid, ppid));
            }
        }
        out
    }

    #[cfg(not(target_os = "linux"))]
    fn list(&mut self) -> Vec<(u32, u32)> {
        use sysinfo::{ProcessRefreshKind, ProcessesToUpdate};
        if self.sys.is_none() {
            self.sys = sysinfo::System::new().ok();
        }
        let Some(sys) = self.sys.as_mut() else {
            return Vec::new();
        };
        sys.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing(),
        );
        sys.processes()
            .iter()
            .map(|(pid, p)| {
                let ppid = p.parent().map(|pp| pp.as_u32()).unwrap_or(0);
                (pid.as_u32(), ppid)
            })
            .collect()
    }
}

/// How often the swap and shared-memory figures (from `/proc/PID/status`) are read; the
/// resident, anonymous and file-backed figures (from `/proc/PID/statm`) are read every
/// sample. The kernel writes `status` (60 lines) several times slower than `statm` (one), and
/// swap moves over seconds.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);

/// Resident and shared (file-backed + shared-memory) bytes from the text of
/// `/proc/PID/statm` (`size resident shared text lib data dt`, in pages). Resident is
/// anonymous + file + shmem, and shared is file + shmem, so the difference is `RssAnon`.
pub fn parse_statm(statm: &str, page: u64) -> Option<(u64, u64)> {
    let mut f = statm.split_ascii_whitespace().skip(1);
    let resident: u64 = f.next()?.parse().ok()?;
    let shared: u64 = f.next()?.parse().ok()?;
    Some((resident.saturating_mul(page), shared.saturating_mul(page)))
}

/// Reads the memory of single processes.
#[derive(Debug, Default)]
pub struct MemReader {
    /// `/proc/PID/statm` and `/proc/PID/status` of each member, kept open: re-reading an
    /// open file skips the open and close, which cost more than the read. A file whose
    /// process died fails to read (ESRCH) even if the pid is reused, so a new process is
    /// never mistaken for it.
    #[cfg(target_os = "linux")]
    open: HashMap<u32, Files>,
    #[cfg(target_os = "linux")]
    buf: Vec<u8>,
    #[cfg(target_os = "linux")]
    page: u64,
    #[cfg(target_os = "linux")]
    status_at: Option<Instant>,
    #[cfg(not(target_os = "linux"))]
    sys: Option<sysinfo::System>,
}

#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Files {
    statm: std::fs::File,
    status: Option<std::fs::File>,
}

/// At most this many processes keep their files open (a larger tree reopens the rest).
#[cfg(target_os = "linux")]
const MAX_OPEN: usize = 256;

impl MemReader {
    /// Sums the memory of `pids` (sorted) at `now`; returns the total and how many could be
    /// read. Swap and shared memory are in the total only on samples that read them (see
    /// [`STATUS_EVERY`]).
    pub fn sum(&mut self, pids: &[u32], now: Instant) -> (ProcMem, usize) {
        let mut total = ProcMem::default();
        let mut read = 0;
        let full = self.prepare(pids, now);
        for &pid in pids {
            if let Some(m) = self.read(pid, full) {
                total.add(&m);
                read += 1;
            }
        }
        (total, read)
    }

    /// Returns whether this sample also reads the slower figures.
    #[cfg(target_os = "linux")]
    fn prepare(&mut self, pids: &[u32], now: Instant) -> bool {
        self.open.retain(|pid, _| pids.binary_search(pid).is_ok());
        if self.buf.is_empty() {
            self.buf = vec![0; 16 * 1024];
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            self.page = u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096);
        }
        let full = self.status_at.is_none_or(|t| now >= t + STATUS_EVERY);
        if full {
            self.status_at = Some(now);
        }
        full
    }

    #[cfg(target_os = "linux")]
    fn read(&mut self, pid: u32, full: bool) -> Option<ProcMem> {
        use std::os::unix::fs::FileExt;
        let mut files = match self.open.remove(&pid) {
            Some(f) => f,
            None => Files {
                statm: std::fs::File::open(format!("/proc/{pid}/statm")).ok()?,
                status: None,
            },
        };
        let n = files.statm.read_at(&mut self.buf, 0).ok()?;
        let (rss, shared) = parse_statm(std::str::from_utf8(&self.buf[..n]).ok()?, self.page)?;
        let mut m = ProcMem {
            rss,
            anon: Some(rss.saturating_sub(shared)),
            file: Some(shared),
            shmem: None,
            swap: None,
        };
        if full {
            if files.status.is_none() {
                files.status = std::fs::File::open(format!("/proc/{pid}/status")).ok();
            }
            if let Some(f) = &files.status
                && let Ok(n) = f.read_at(&mut self.buf, 0)
                && let Ok(text) = std::str::from_utf8(&self.buf[..n])
            {
                let st = parse_status(text);
                // A process without memory (a zombie) reports no lines: nothing to add.
                m.shmem = st.shmem.or(Some(0));
                m.swap = st.swap.or(Some(0));
            }
        }
        if self.open.len() < MAX_OPEN {
            self.open.insert(pid, files);
        }
        Some(m)
    }

    #[cfg(not(target_os = "linux"))]
    fn prepare(&mut self, pids: &[u32], _now: Instant) -> bool {
        use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate};
        if self.sys.is_none() {
            self.sys = sysinfo::System::new().ok();
        }
        if let Some(sys) = self.sys.as_mut() {
            let pids: Vec<Pid> = pids.iter().map(|&p| Pid::from_u32(p)).collect();
            sys.refresh_processes_specifics(
                ProcessesToUpdate::Some(&pids),
                true,
                ProcessRefreshKind::nothing().with_memory(),
            );
        }
        false
    }

    #[cfg(not(target_os = "linux"))]
    fn read(&mut self, pid: u32, _full: bool) -> Option<ProcMem> {
        let p = self.sys.as_ref()?.process(sysinfo::Pid::from_u32(pid))?;
        Some(ProcMem {
            rss: p.memory(),
            ..ProcMem::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_from_tables() {
        let procs = [
            (1, 0),
            (100, 1),   // root
            (101, 100), // child
            (102, 100), // child
            (103, 101), // grandchild
            (200, 1),   // unrelated
            (201, 200),
        ];
        let cases: &[(u32, &[u32])] = &[
            (100, &[100, 101, 102, 103]),
            (101, &[101, 103]),
            (103, &[103]),
            (200, &[200, 201]),
            (999, &[]),
        ];
        for (root, want) in cases {
            assert_eq!(descendants(*root, &procs), *want, "root {root}");
        }
        // A torn listing with a cycle terminates.
        assert_eq!(descendants(5, &[(5, 6), (6, 5)]), vec![5, 6]);
    }

    #[test]
    fn listing_period_follows_its_cost() {
        let cases = [
            (Duration::from_micros(50), RESCAN_MIN),
            (Duration::from_micros(400), Duration::from_millis(400)),
            (Duration::from_millis(1), Duration::from_secs(1)),
            (Duration::from_millis(25), RESCAN_MAX),
        ];
        for (cost, want) in cases {
            assert_eq!(rescan_period(cost), want, "{cost:?}");
        }
    }

    #[test]
    fn stat_parent_survives_odd_names() {
        let cases: &[(&str, Option<u32>)] = &[
            ("4242 (python3) S 4200 4242 4200 0 -1", Some(4200)),
            ("77 (my (weird) name) R 1 77 77 0", Some(1)),
            ("78 (a b) c) Z 12 0 0", Some(12)),
            ("garbage", None),
            ("9 (x) S", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_stat_ppid(text), *want, "{text}");
        }
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 9000 kB\n\
                    VmRSS:\t  3000 kB\nRssAnon:\t  2000 kB\nRssFile:\t   900 kB\n\
                    RssShmem:\t   100 kB\nVmSwap:\t    50 kB\nThreads:\t4\n";
        let m = parse_status(text);
        assert_eq!(
            m,
            ProcMem {
                rss: 3000 * 1024,
                anon: Some(2000 * 1024),
                file: Some(900 * 1024),
                shmem: Some(100 * 1024),
                swap: Some(50 * 1024),
            }
        );
        // A kernel thread: no memory lines at all.
        assert_eq!(
            parse_status("Name:\tkthreadd\nState:\tS\n"),
            ProcMem::default()
        );
    }

    #[test]
    fn statm_fields() {
        // size resident shared text lib data dt
        assert_eq!(
            parse_statm("52390 4523 1288 1 0 5083 0\n", 4096),
            Some((4523 * 4096, 1288 * 4096))
        );
        assert_eq!(parse_statm("0 0 0 0 0 0 0", 4096), Some((0, 0)));
        assert_eq!(parse_statm("12", 4096), None);
        assert_eq!(parse_statm("", 4096), None);
    }

    #[test]
    fn sums_keep_missing_fields_missing() {
        let mut total = ProcMem::default();
        total.add(&ProcMem {
            rss: 10,
            anon: Some(4),
            ..ProcMem::default()
        });
        total.add(&ProcMem {
            rss: 5,
            anon: Some(1),
            swap: Some(2),
            ..ProcMem::default()
        });
        assert_eq!(total.rss, 15);
        assert_eq!(total.anon, Some(5));
        assert_eq!(total.swap, Some(2));
        assert_eq!(total.file, None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn children_files_agree_with_a_full_listing() {
        use std::os::unix::process::CommandExt;
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5 & (sleep 5 & wait) & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let root = sh.id();
        let mut lister = Lister::default();
        let mut found = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while found.len() < 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            found = lister
                .tree_from_children_files(root)
                .expect("children files");
        }
        let full = descendants(root, &lister.list());
        unsafe { libc::killpg(root as i32, libc::SIGKILL) };
        let _ = sh.wait();
        assert_eq!(
            found.len(),
            5,
            "sh, two sleeps, a subshell and its sleep: {found:?}"
        );
        assert_eq!(found, full);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_its_own_tree() {
        let me = std::process::id();
        let mut tree = Tree::new(Some(me));
        let members = tree.refresh(Instant::now()).to_vec();
        assert!(members.contains(&me));
        let mut reader = MemReader::default();
        let now = Instant::now();
        let (mem, read) = reader.sum(&members, now);
        assert!(read >= 1);
        assert!(mem.rss > 0 && mem.anon.is_some() && mem.file.is_some());
        assert!(mem.swap.is_some(), "the first sample reads status");
        let (again, _) = reader.sum(&members, now + Duration::from_millis(10));
        assert!(
            again.swap.is_none() && again.rss > 0,
            "status once a second"
        );
        let (later, _) = reader.sum(&members, now + STATUS_EVERY);
        assert!(later.swap.is_some());
    }
}
