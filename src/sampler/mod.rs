//! The sampler: a thread that polls the enabled probes at a fixed interval, stamps every
//! sample on one monotonic clock, streams samples to CSV and JSON lines, keeps peaks and
//! minima per series, and takes event marks from its caller.
//!
//! Probes: [`nvml`] (device and per-process GPU memory, PCIe), [`cuda`] (the tool's own
//! context, off by default: it costs VRAM), [`comfy`] (ComfyUI's `/system_stats`), [`system`]
//! (RAM, swap, and the followed process tree). A probe that cannot open is recorded in
//! [`Summary::unavailable`] with a one-line reason; it is never fatal.

pub mod comfy;
pub(crate) mod command;
pub mod cuda;
pub mod nvml;
pub(crate) mod poller;
pub mod probe;
pub mod proctree;
pub(crate) mod series;
pub(crate) mod stats;
pub mod system;
pub(crate) mod wddm;
pub mod writer;

use crate::error::{Error, Result, io_error};
use probe::{Context, Probe, SeriesDef, Unavailable, Unit};
use serde::{Deserialize, Serialize};
use stats::{Acc, Derived, Mark};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use stats::rss_at;

pub use crate::nvidia::NVML_LIB_ENV;

/// At most this many marks are kept in the summary (about 400 bytes each); later ones still
/// reach the files.
pub const MAX_MARKS: usize = 10_000;

/// What to sample, how often, and where to write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Time between samples (default 100 ms; 1 ms works).
    pub interval: Duration,
    /// Read NVML (default on).
    pub nvml: bool,
    /// The NVML library to load; `None`: `$VRAMBISECT_NVML_LIB`, else the system's.
    pub nvml_lib: Option<PathBuf>,
    /// Read `cuMemGetInfo` from the tool's own CUDA context (default **off**: a context costs
    /// 300–500 MB of the VRAM being measured).
    pub cuda: bool,
    /// A running ComfyUI to poll (`http://127.0.0.1:8188`); may also be set later.
    pub comfy_url: Option<String>,
    /// Read RAM, swap and the process tree (default on).
    pub system: bool,
    /// The process tree to follow (ComfyUI's pid); may also be set later.
    pub root_pid: Option<u32>,
    /// Where to stream samples as CSV.
    pub csv: Option<PathBuf>,
    /// Where to stream samples as JSON lines.
    pub jsonl: Option<PathBuf>,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            interval: Duration::from_millis(100),
            nvml: true,
            nvml_lib: None,
            cuda: false,
            comfy_url: None,
            system: true,
            root_pid: None,
            csv: None,
            jsonl: None,
        }
    }
}

/// A GPU as the probes saw it when they opened.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// NVML's index (PCI bus order); the `N` in `gpuN.…` series.
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// NVML's total, which includes the driver's reserve.
    pub total_bytes: Option<u64>,
    /// NVML v2 `reserved` (mostly GSP firmware); CUDA does not count it as existing.
    pub reserved_bytes: Option<u64>,
    /// CUDA's total, when the CUDA probe ran.
    pub cuda_total_bytes: Option<u64>,
    /// Which NVML memory call answered: `v2`, or `v1` (no reserved figure).
    pub memory_info: Option<String>,
}

/// Peaks and minima of one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesStats {
    pub name: String,
    pub unit: Unit,
    /// Samples that carried a value.
    pub count: u64,
    pub min: i64,
    pub max: i64,
    pub last: i64,
    /// When the minimum / maximum was first reached, ms since the start.
    pub at_min_ms: f64,
    pub at_max_ms: f64,
}

/// Everything a sampling run found, as `--json` prints it and `samples-summary.json` keeps it
/// (read back typed by `report`; a file from an older version lacks some fields, hence the
/// defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub samples: u64,
    pub duration_ms: f64,
    pub interval_ms: f64,
    /// Wall-clock time of `t_ms = 0` (ms since the Unix epoch): the one anchor of the
    /// monotonic clock every sample and mark is stamped on.
    pub started_unix_ms: u64,
    /// Ticks skipped because a sample took longer than the interval.
    pub missed_ticks: u64,
    /// Probes, or parts of them, that gave nothing, with why.
    pub unavailable: Vec<Unavailable>,
    pub devices: Vec<DeviceInfo>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    /// Series that carried at least one value.
    pub series: Vec<SeriesStats>,
    pub marks: Vec<Mark>,
    /// Marks beyond [`MAX_MARKS`], written to the files but not kept here.
    pub marks_dropped: u64,
    /// The VRAM the tool's own CUDA context held (NVML's figure for this process, summed
    /// over devices, at its peak), when the CUDA probe ran and NVML reports it.
    pub cuda_context_bytes: Option<u64>,
    pub root_pid: Option<u32>,
    pub comfy_url: Option<String>,
    pub csv: Option<PathBuf>,
    pub jsonl: Option<PathBuf>,
    /// The first error writing the files; sampling went on without them.
    pub write_error: Option<String>,
}

impl Summary {
    /// The statistics of one series, by name.
    pub fn get(&self, name: &str) -> Option<&SeriesStats> {
        self.series.iter().find(|s| s.name == name)
    }
}

/// Requests from the caller, applied by the sampler thread at its next tick.
#[derive(Default)]
struct Control {
    stop: bool,
    /// Stamped under this lock, so a mark is always ordered correctly against samples.
    marks: Vec<(u64, String)>,
    root_pid: Option<u32>,
    comfy_url: Option<String>,
}

/// What the probes found when they opened; fixed for the run.
struct Fixed {
    series: Vec<SeriesDef>,
    /// The columns a mark records around it (see [`stats::is_mark_series`]).
    mark_cols: Vec<(usize, Arc<str>)>,
    devices: Vec<DeviceInfo>,
    driver_version: Option<String>,
    cuda_driver_version: Option<String>,
    started_unix_ms: u64,
    cuda: bool,
    csv: Option<PathBuf>,
    jsonl: Option<PathBuf>,
    interval: Duration,
}

/// What changes as the run goes on, published after every sample for [`Sampler::snapshot`].
/// The sampler thread keeps its own copy, except for the marks, which only the shared copy
/// holds.
#[derive(Default, Clone)]
struct Live {
    samples: u64,
    t_us: u64,
    missed_ticks: u64,
    accs: Vec<Acc>,
    unavailable: Vec<Unavailable>,
    marks: Vec<MarkRec>,
    marks_dropped: u64,
    root_pid: Option<u32>,
    comfy_url: Option<String>,
    write_error: Option<String>,
}

/// A mark as kept in memory: its figures by column, named only when a summary is built.
#[derive(Clone)]
struct MarkRec {
    t_us: u64,
    label: String,
    before: Box<[Option<i64>]>,
    after: Box<[Option<i64>]>,
}

impl MarkRec {
    fn named(&self, cols: &[(usize, Arc<str>)]) -> Mark {
        let map = |v: &[Option<i64>]| {
            cols.iter()
                .zip(v)
                .filter_map(|((_, name), v)| v.map(|v| (name.clone(), v)))
                .collect()
        };
        Mark {
            t_ms: ms(self.t_us),
            label: self.label.clone(),
            before: map(&self.before),
            after: map(&self.after),
        }
    }
}

struct Shared {
    control: Mutex<Control>,
    wake: Condvar,
    live: Mutex<Live>,
    t0: Instant,
    fixed: Fixed,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(t_us: u64) -> f64 {
    t_us as f64 / 1000.0
}

/// The running sampler; owns its thread. Dropping it stops the thread and flushes the files.
pub struct Sampler {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<Summary>>,
}

impl Sampler {
    /// Opens the probes and the files, and starts sampling. Probes that fail to open are
    /// recorded as unavailable (one line each); only an unwritable output file or a zero
    /// interval is an error.
    pub fn start(config: SamplerConfig) -> Result<Sampler> {
        if config.interval.is_zero() {
            return Err(Error::usage("the sampling interval must be above zero"));
        }
        let writers = writer::Writers::create(config.csv.as_deref(), config.jsonl.as_deref())
            .map_err(|(path, e)| io_error("create", &path, &e))?;
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name("vrambisect-sampler".into())
            .spawn(move || sampler_thread(config, writers, ready_tx))
            .map_err(|e| Error::environment(format!("cannot start the sampler thread: {e}")))?;
        let Ok(shared) = ready_rx.recv() else {
            let why = match handle.join() {
                Err(p) => panic_text(&p),
                Ok(_) => "it ended early".into(),
            };
            return Err(Error::environment(format!(
                "the sampler failed to start: {why}"
            )));
        };
        Ok(Sampler {
            shared,
            handle: Some(handle),
        })
    }

    /// Records an event mark (node started, prompt finished, …) now, on the samples' clock.
    pub fn mark(&self, label: &str) {
        let mut c = lock(&self.shared.control);
        let t = self.shared.t0.elapsed().as_micros() as u64;
        c.marks.push((t, label.to_string()));
    }

    /// Follows this process tree from the next sample on.
    pub fn set_root_pid(&self, pid: u32) {
        lock(&self.shared.control).root_pid = Some(pid);
    }

    /// Polls this ComfyUI from now on.
    pub fn set_comfy_url(&self, url: &str) {
        lock(&self.shared.control).comfy_url = Some(url.to_string());
    }

    /// The statistics so far (for a live display).
    pub fn snapshot(&self) -> Summary {
        summarize(&self.shared.fixed, &lock(&self.shared.live))
    }

    /// Time on the samples' clock (since the start).
    pub fn elapsed(&self) -> Duration {
        self.shared.t0.elapsed()
    }

    /// Stops sampling: joins the thread, finishes and flushes the files.
    pub fn stop(mut self) -> Summary {
        self.finish()
    }

    fn finish(&mut self) -> Summary {
        lock(&self.shared.control).stop = true;
        self.shared.wake.notify_all();
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(summary)) => summary,
            Some(Err(p)) => {
                let mut s = self.snapshot();
                s.unavailable.push(Unavailable::new(
                    "sampler",
                    format!("the sampler thread failed: {}", panic_text(&p)),
                ));
                s
            }
            None => self.snapshot(),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.finish();
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Builds the summary from the fixed facts and the live statistics.
fn summarize(fixed: &Fixed, live: &Live) -> Summary {
    let series: Vec<SeriesStats> = fixed
        .series
        .iter()
        .zip(&live.accs)
        .filter(|(_, a)| a.count > 0)
        .map(|(s, a)| SeriesStats {
            name: s.name.clone(),
            unit: s.unit,
            count: a.count,
            min: a.min,
            max: a.max,
            last: a.last,
            at_min_ms: ms(a.at_min_us),
            at_max_ms: ms(a.at_max_us),
        })
        .collect();
    let cuda_context_bytes = fixed.cuda.then(|| {
        series
            .iter()
            .filter(|s| s.name.ends_with(".self.used"))
            .map(|s| s.max.max(0) as u64)
            .sum::<u64>()
    });
    Summary {
        samples: live.samples,
        duration_ms: ms(live.t_us),
        interval_ms: fixed.interval.as_secs_f64() * 1000.0,
        started_unix_ms: fixed.started_unix_ms,
        missed_ticks: live.missed_ticks,
        unavailable: live.unavailable.clone(),
        devices: fixed.devices.clone(),
        driver_version: fixed.driver_version.clone(),
        cuda_driver_version: fixed.cuda_driver_version.clone(),
        series,
        marks: live
            .marks
            .iter()
            .map(|m| m.named(&fixed.mark_cols))
            .collect(),
        marks_dropped: live.marks_dropped,
        cuda_context_bytes: cuda_context_bytes.filter(|&b| b > 0),
        root_pid: live.root_pid,
        comfy_url: live.comfy_url.clone(),
        csv: fixed.csv.clone(),
        jsonl: fixed.jsonl.clone(),
        write_error: live.write_error.clone(),
    }
}

/// The opened probes in column order (each with where its columns start), the device
/// facts they found, and what could not be opened.
struct Opened {
    probes: Vec<(Box<dyn Probe>, usize)>,
    devices: Vec<DeviceInfo>,
    driver_version: Option<String>,
    cuda_driver_version: Option<String>,
    unavailable: Vec<Unavailable>,
}

/// Opens every enabled probe.
fn open_probes(config: &SamplerConfig) -> Opened {
    let mut unavailable = Vec::new();
    let mut list: Vec<Box<dyn Probe>> = Vec::new();
    let mut devices = Vec::new();
    let (mut driver, mut cuda_driver) = (None, None);
    let mut nvml_names = Vec::new();
    if config.nvml {
        let lib = crate::nvidia::nvml_lib(config.nvml_lib.as_deref());
        match nvml::NvmlProbe::open(lib.as_deref(), config.interval, config.cuda) {
            Ok(o) => {
                devices = o.devices;
                driver = o.driver_version;
                cuda_driver = o.cuda_driver_version;
                unavailable.extend(o.notes);
                nvml_names = o.probe.device_names();
                list.push(Box::new(o.probe));
            }
            Err(u) => unavailable.push(u),
        }
    }
    if config.cuda {
        match cuda::CudaProbe::open(&devices) {
            Ok(o) => {
                for (index, total, uuid) in o.totals {
                    match devices.iter_mut().find(|d| d.index == index) {
                        Some(d) => d.cuda_total_bytes = Some(total),
                        None => devices.push(DeviceInfo {
                            index,
                            uuid,
                            cuda_total_bytes: Some(total),
                            ..DeviceInfo::default()
                        }),
                    }
                }
                unavailable.extend(o.notes);
                list.push(Box::new(o.probe));
            }
            Err(u) => unavailable.push(u),
        }
    }
    // Always present: ComfyUI's address often becomes known only after it started.
    let mut comfy = comfy::ComfyProbe::new(nvml_names, config.interval);
    if let Some(url) = &config.comfy_url {
        comfy.set_comfy_url(url);
    }
    list.push(Box::new(comfy));
    if config.system {
        match system::SystemProbe::open() {
            Ok(p) => list.push(Box::new(p)),
            Err(u) => unavailable.push(u),
        }
    }
    // Only where NVML found a GPU: without one there is no GPU memory to read.
    #[cfg(windows)]
    if config.nvml && !devices.is_empty() {
        match wddm::WddmProbe::open() {
            Ok(p) => list.push(Box::new(p)),
            Err(u) => unavailable.push(u),
        }
    }
    let mut at = 0;
    let probes = list
        .into_iter()
        .map(|p| {
            let start = at;
            at += p.series().len();
            (p, start)
        })
        .collect();
    Opened {
        probes,
        devices,
        driver_version: driver,
        cuda_driver_version: cuda_driver,
        unavailable,
    }
}

fn sampler_thread(
    config: SamplerConfig,
    mut writers: writer::Writers,
    ready: std::sync::mpsc::SyncSender<Arc<Shared>>,
) -> Summary {
    let (shared, mut probes, derived) = start_sampling(&config, &mut writers);
    if ready.send(Arc::clone(&shared)).is_err() {
        return summarize(&shared.fixed, &lock(&shared.live));
    }
    drop(ready);

    let mark_cols = &shared.fixed.mark_cols;
    let n = shared.fixed.series.len();
    let mut live = lock(&shared.live).clone();
    let mut row: Vec<Option<i64>> = vec![None; n];
    let mut tree = proctree::Tree::new(config.root_pid);
    let self_pid = std::process::id();
    let mut awaiting_after: Vec<usize> = Vec::new();
    let mut next = shared.t0;
    let interval = config.interval;
    loop {
        let tick = wait_for_tick(&shared, next);
        let t_us = tick.now.duration_since(shared.t0).as_micros() as u64;
        if !tick.marks.is_empty() {
            let mut shared_live = lock(&shared.live);
            for (t, label) in tick.marks {
                writers.mark(t, &label);
                if let Some(i) = record_mark(&mut shared_live, mark_cols, &live, t, label) {
                    awaiting_after.push(i);
                }
            }
        }
        if let Some(pid) = tick.root {
            tree.set_root(pid);
            live.root_pid = Some(pid);
        }
        if let Some(url) = tick.url {
            for (p, _) in &mut probes {
                p.set_comfy_url(&url);
            }
            live.comfy_url = Some(url);
        }

        row.fill(None);
        let root_pid = tree.root();
        let ctx = Context {
            tree: tree.refresh(tick.now),
            root_pid,
            self_pid,
            now: tick.now,
        };
        for (p, start) in &mut probes {
            let len = p.series().len();
            p.sample(&ctx, &mut row[*start..*start + len]);
            live.unavailable.extend(p.take_unavailable());
        }
        derived.compute(&mut row);
        stats::accumulate(&mut live.accs, &row, t_us);
        if !awaiting_after.is_empty() {
            let mut shared_live = lock(&shared.live);
            for m in awaiting_after.drain(..) {
                shared_live.marks[m].after = mark_cols.iter().map(|(i, _)| row[*i]).collect();
            }
        }
        writers.sample(t_us, &row);
        live.samples += 1;
        live.t_us = t_us;
        if live.write_error.is_none()
            && let Some(e) = writers.error()
        {
            live.write_error = Some(e.to_string());
        }
        publish(&shared, &live);
        // Stopping takes one last sample first: the end of the run is on record, and a mark
        // made just before `stop` gets its "after" figures.
        if tick.stop {
            return finish_sampling(&shared, &mut writers, &mut probes, live);
        }

        next += interval;
        let after = Instant::now();
        if next < after {
            // Fell behind (a slow probe, a busy machine): skip the lost ticks rather than
            // sampling in a burst.
            let behind = after.duration_since(next);
            let skipped = behind.as_nanos() / interval.as_nanos() + 1;
            live.missed_ticks += skipped as u64;
            next += interval * u32::try_from(skipped).unwrap_or(u32::MAX);
        }
    }
}

/// Opens the probes, plans the series (derived ones included), writes the files' header and
/// makes the state shared with [`Sampler`].
fn start_sampling(
    config: &SamplerConfig,
    writers: &mut writer::Writers,
) -> (Arc<Shared>, Vec<Placed>, Derived) {
    let Opened {
        probes,
        devices,
        driver_version,
        cuda_driver_version,
        unavailable,
    } = open_probes(config);
    let mut series: Vec<SeriesDef> = probes
        .iter()
        .flat_map(|(p, _)| p.series().iter().cloned())
        .collect();
    let (derived, derived_defs) = Derived::plan(&series);
    series.extend(derived_defs);
    let mark_cols: Vec<(usize, Arc<str>)> = series
        .iter()
        .enumerate()
        .filter(|(_, s)| stats::is_mark_series(&s.name))
        .map(|(i, s)| (i, Arc::from(s.name.as_str())))
        .collect();
    let t0 = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    writers.header(&writer::Header {
        format: "vrambisect samples v1",
        started_unix_ms,
        interval_ms: config.interval.as_secs_f64() * 1000.0,
        series: &series,
    });
    let shared = Arc::new(Shared {
        control: Mutex::new(Control::default()),
        wake: Condvar::new(),
        live: Mutex::new(Live {
            accs: vec![Acc::default(); series.len()],
            unavailable,
            root_pid: config.root_pid,
            comfy_url: config.comfy_url.clone(),
            ..Live::default()
        }),
        t0,
        fixed: Fixed {
            series,
            mark_cols,
            devices,
            driver_version,
            cuda_driver_version,
            started_unix_ms,
            cuda: config.cuda,
            csv: config.csv.clone(),
            jsonl: config.jsonl.clone(),
            interval: config.interval,
        },
    });
    (shared, probes, derived)
}

/// A probe and the first column of its series in a sample row.
type Placed = (Box<dyn Probe>, usize);

/// What the controlling side asked for by the time of a tick.
struct Tick {
    marks: Vec<(u64, String)>,
    root: Option<u32>,
    url: Option<String>,
    stop: bool,
    now: Instant,
}

/// Sleeps until the tick at `next`, waking at once for a stop.
fn wait_for_tick(shared: &Shared, next: Instant) -> Tick {
    let mut c = lock(&shared.control);
    loop {
        let now = Instant::now();
        if c.stop || now >= next {
            break;
        }
        c = shared
            .wake
            .wait_timeout(c, next - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    // The sample's time is taken under the lock that stamps marks.
    let now = Instant::now();
    Tick {
        marks: std::mem::take(&mut c.marks),
        root: c.root_pid.take(),
        url: c.comfy_url.take(),
        stop: c.stop,
        now,
    }
}

/// Keeps a mark with the latest figures before it; its index, so the next sample can give
/// its "after" figures (`None` past [`MAX_MARKS`], counted instead). Marks live only in the
/// shared copy: they are rare, and copying them every tick would cost more than the rest of
/// the sample.
fn record_mark(
    shared_live: &mut Live,
    mark_cols: &[(usize, Arc<str>)],
    live: &Live,
    t_us: u64,
    label: String,
) -> Option<usize> {
    if shared_live.marks.len() >= MAX_MARKS {
        shared_live.marks_dropped += 1;
        return None;
    }
    let before = mark_cols
        .iter()
        .map(|(i, _)| live.accs[*i].last())
        .collect();
    shared_live.marks.push(MarkRec {
        t_us,
        label,
        before,
        after: Box::new([]),
    });
    Some(shared_live.marks.len() - 1)
}

/// Ends the files, collects what the probes could not do, and summarises.
fn finish_sampling(
    shared: &Shared,
    writers: &mut writer::Writers,
    probes: &mut [Placed],
    mut live: Live,
) -> Summary {
    writers.finish(live.t_us, live.samples);
    live.write_error = writers.error().map(str::to_string);
    for (p, _) in probes.iter_mut() {
        live.unavailable.extend(p.take_unavailable());
        live.unavailable.extend(p.final_unavailable());
    }
    publish(shared, &live);
    let mut l = lock(&shared.live);
    let has_cuda = shared
        .fixed
        .series
        .iter()
        .any(|s| s.name.ends_with(".cuda.free"));
    if has_cuda && summarize(&shared.fixed, &l).cuda_context_bytes.is_none() {
        l.unavailable.push(Unavailable::new(
            "cuda.footprint",
            "NVML reports no GPU memory for this process, so the cost of the own CUDA context \
             is unknown (it is inside every nvml.used figure)",
        ));
    }
    summarize(&shared.fixed, &l)
}

/// Copies the live statistics where [`Sampler::snapshot`] reads them, reusing allocations
/// (marks are kept there directly).
fn publish(shared: &Shared, live: &Live) {
    let mut l = lock(&shared.live);
    l.samples = live.samples;
    l.t_us = live.t_us;
    l.missed_ticks = live.missed_ticks;
    l.accs.copy_from_slice(&live.accs);
    if l.unavailable.len() != live.unavailable.len() {
        l.unavailable.clone_from(&live.unavailable);
    }
    l.root_pid = live.root_pid;
    l.comfy_url.clone_from(&live.comfy_url);
    l.write_error.clone_from(&live.write_error);
}
