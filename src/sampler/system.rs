//! The system probe: RAM and swap of the machine, and the resident memory of the followed
//! process tree. On Linux both come from `/proc` files kept open (re-reading an open file is
//! several times cheaper than opening it, which matters at 100 Hz); elsewhere from sysinfo.

use super::probe::{Context, Probe, SeriesDef, Unavailable, Unit, to_i64};
use super::proctree::MemReader;
use super::series;
use sysinfo::{MemoryRefreshKind, System};

/// The machine's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
    /// Windows: the commit charge and the commit limit (RAM plus page files), in bytes. There
    /// "out of memory" means the charge reached the limit (`os error 1455`), whatever RAM is
    /// free.
    pub commit: Option<(u64, u64)>,
}

/// Reads `/proc/meminfo` (kB, which are KiB). `None` without `MemTotal`; without
/// `MemAvailable` (kernels before 3.14) the available figure is `MemFree + Cached`, roughly
/// what the kernel computes.
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut m = MemInfo::default();
    let (mut total, mut available, mut free, mut cached) = (None, None, 0, 0);
    // The kernel writes about 50 lines; the six read here come first (SwapFree is about the
    // 16th), so reading stops once all were seen.
    let mut wanted = 6;
    for line in text.lines() {
        if wanted == 0 {
            break;
        }
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(bytes) = crate::text::proc_kib(rest) else {
            continue;
        };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemAvailable" => available = Some(bytes),
            "MemFree" => free = bytes,
            "Cached" => cached = bytes,
            "SwapTotal" => m.swap_total = bytes,
            "SwapFree" => m.swap_free = bytes,
            _ => continue,
        }
        wanted -= 1;
    }
    m.total = total?;
    m.available = available.unwrap_or(free + cached);
    Some(m)
}

/// Where the machine's memory figures come from.
enum Source {
    /// `/proc/meminfo`, kept open.
    #[cfg(unix)]
    Proc(std::fs::File, Vec<u8>),
    Sysinfo(Box<System>),
    /// `GlobalMemoryStatusEx`, with the commit limit.
    #[cfg(windows)]
    Windows,
}

impl Source {
    fn open() -> Result<Source, Unavailable> {
        // (Only on Unix: wine shows the host's /proc to Windows programs as well.)
        #[cfg(unix)]
        if let Ok(f) = std::fs::File::open("/proc/meminfo") {
            return Ok(Source::Proc(f, vec![0; 16 * 1024]));
        }
        #[cfg(windows)]
        if windows_memory().is_some() {
            return Ok(Source::Windows);
        }
        let sys = System::new()
            .map_err(|e| Unavailable::new("system", format!("cannot read system memory: {e}")))?;
        Ok(Source::Sysinfo(Box::new(sys)))
    }

    fn read(&mut self) -> Option<MemInfo> {
        match self {
            #[cfg(windows)]
            Source::Windows => windows_memory(),
            #[cfg(unix)]
            Source::Proc(f, buf) => {
                use std::os::unix::fs::FileExt;
                let n = f.read_at(buf, 0).ok()?;
                parse_meminfo(std::str::from_utf8(&buf[..n]).ok()?)
            }
            Source::Sysinfo(sys) => {
                sys.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram().with_swap());
                (sys.total_memory() > 0).then(|| MemInfo {
                    total: sys.total_memory(),
                    available: sys.available_memory(),
                    swap_total: sys.total_swap(),
                    swap_free: sys.free_swap(),
                    commit: None,
                })
            }
        }
    }
}

/// The machine's memory on Windows (`GlobalMemoryStatusEx`): physical memory, and the
/// commit limit ("total page file" there: RAM plus page files) with what is left of it.
#[cfg(windows)]
pub fn windows_memory() -> Option<MemInfo> {
    use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
    // SAFETY: the structure is the size its first field says.
    let m = unsafe {
        let mut m: MEMORYSTATUSEX = std::mem::zeroed();
        m.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
        (GlobalMemoryStatusEx(&mut m) != 0).then_some(m)
    }?;
    // Windows has no swap figure of its own here: the page files are what the commit limit
    // adds to RAM, and "swap used" is the commit beyond that (as sysinfo reads it too).
    let swap_total = m.ullTotalPageFile.saturating_sub(m.ullTotalPhys);
    Some(MemInfo {
        total: m.ullTotalPhys,
        available: m.ullAvailPhys,
        swap_total,
        swap_free: swap_total.min(m.ullAvailPageFile),
        commit: Some((
            m.ullTotalPageFile.saturating_sub(m.ullAvailPageFile),
            m.ullTotalPageFile,
        )),
    })
}

/// The commit charge and limit, in bytes.
#[cfg(windows)]
pub fn commit_charge() -> Option<(u64, u64)> {
    windows_memory()?.commit
}

/// Only Windows has a commit limit that decides "out of memory".
#[cfg(not(windows))]
pub fn commit_charge() -> Option<(u64, u64)> {
    None
}

/// Column order of this probe.
const RAM_TOTAL: usize = 0;
const RAM_AVAILABLE: usize = 1;
const SWAP_USED: usize = 2;
const TREE_PROCS: usize = 3;
const TREE_RSS: usize = 4;
const TREE_RSS_ANON: usize = 5;
const TREE_RSS_FILE: usize = 6;
const TREE_RSS_SHMEM: usize = 7;
const TREE_SWAP: usize = 8;
/// Windows only.
const COMMIT_USED: usize = 9;
const COMMIT_LIMIT: usize = 10;

/// Reads RAM, swap and the tree's memory.
pub struct SystemProbe {
    source: Source,
    series: Vec<SeriesDef>,
    mem: MemReader,
}

impl SystemProbe {
    pub fn open() -> Result<SystemProbe, Unavailable> {
        let source = Source::open()?;
        let series = vec![
            SeriesDef::bytes(series::RAM_TOTAL),
            SeriesDef::bytes(series::RAM_AVAILABLE),
            SeriesDef::bytes(series::SWAP_USED),
            SeriesDef::new(series::TREE_PROCS, Unit::Count),
            SeriesDef::bytes(series::TREE_RSS),
            SeriesDef::bytes(series::TREE_RSS_ANON),
            SeriesDef::bytes(series::TREE_RSS_FILE),
            SeriesDef::bytes(series::TREE_RSS_SHMEM),
            SeriesDef::bytes(series::TREE_SWAP),
        ];
        let mut series = series;
        if cfg!(windows) {
            series.push(SeriesDef::bytes(series::COMMIT_USED));
            series.push(SeriesDef::bytes(series::COMMIT_LIMIT));
        }
        Ok(SystemProbe {
            source,
            series,
            mem: MemReader::default(),
        })
    }
}

impl Probe for SystemProbe {
    fn name(&self) -> &'static str {
        "system"
    }

    fn series(&self) -> &[SeriesDef] {
        &self.series
    }

    fn sample(&mut self, ctx: &Context<'_>, out: &mut [Option<i64>]) {
        if let Some(m) = self.source.read() {
            out[RAM_TOTAL] = Some(to_i64(m.total));
            out[RAM_AVAILABLE] = Some(to_i64(m.available));
            out[SWAP_USED] = Some(to_i64(m.swap_total.saturating_sub(m.swap_free)));
            if let Some((used, limit)) = m.commit
                && out.len() > COMMIT_LIMIT
            {
                out[COMMIT_USED] = Some(to_i64(used));
                out[COMMIT_LIMIT] = Some(to_i64(limit));
            }
        }
        if ctx.tree.is_empty() {
            return;
        }
        let (m, read) = self.mem.sum(ctx.tree, ctx.now);
        if read == 0 {
            // Every member exited since the last listing.
            return;
        }
        out[TREE_PROCS] = Some(read as i64);
        out[TREE_RSS] = Some(to_i64(m.rss));
        out[TREE_RSS_ANON] = m.anon.map(to_i64);
        out[TREE_RSS_FILE] = m.file.map(to_i64);
        out[TREE_RSS_SHMEM] = m.shmem.map(to_i64);
        out[TREE_SWAP] = m.swap.map(to_i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields() {
        let text = "MemTotal:       24683652 kB\nMemFree:         1000000 kB\n\
                    MemAvailable:   22523416 kB\nBuffers:          1 kB\nCached:  2000000 kB\n\
                    SwapCached:            0 kB\nSwapTotal:       2097148 kB\n\
                    SwapFree:        2000000 kB\nHugePages_Total:       0\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(m.total, 24683652 * 1024);
        assert_eq!(m.available, 22523416 * 1024);
        assert_eq!(m.swap_total - m.swap_free, 97148 * 1024);
        // An old kernel without MemAvailable.
        let old = text.replace("MemAvailable:   22523416 kB\n", "");
        assert_eq!(parse_meminfo(&old).unwrap().available, 3000000 * 1024);
        assert_eq!(parse_meminfo("garbage"), None);
    }

    #[test]
    fn reads_this_machine() {
        let mut p = SystemProbe::open().unwrap();
        let mut out = vec![None; p.series().len()];
        let ctx = Context {
            tree: &[],
            root_pid: None,
            self_pid: std::process::id(),
            now: std::time::Instant::now(),
        };
        p.sample(&ctx, &mut out);
        let (total, avail) = (out[RAM_TOTAL].unwrap(), out[RAM_AVAILABLE].unwrap());
        assert!(total > 0 && avail > 0 && avail <= total);
        assert!(out[TREE_RSS].is_none(), "no tree followed");
    }
}
