//! What sampling costs: CPU time of one sample per backend, the CPU share of the whole
//! sampler at 10, 100 and 1000 Hz, and its memory over a long run. `cargo bench --bench
//! sampler` prints the tables recorded in BENCHMARKS.md.
//!
//! NVML and CUDA are the real libraries when this machine has an NVIDIA driver, else the
//! test bed's fakes (which read and parse their state file on every call). Set
//! `VRAMBISECT_BENCH_LONG_SECS` to change the length of the memory run (default 60 s).

#[path = "../tests/support/gpu.rs"]
#[allow(dead_code)]
mod gpu;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use vrambisect::sampler::comfy;
use vrambisect::sampler::cuda::CudaProbe;
use vrambisect::sampler::nvml::NvmlProbe;
use vrambisect::sampler::probe::{Context, Probe};
use vrambisect::sampler::proctree::{Tree, rescan_period};
use vrambisect::sampler::system::SystemProbe;
use vrambisect::sampler::writer::{Header, Writers};
use vrambisect::sampler::{Sampler, SamplerConfig};

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of the whole process (every thread, user + system).
fn process_cpu() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("VmHWM:"))
}

/// Mean thread-CPU and wall time of `f` over `n` calls (after a few warm-up calls).
fn per_call(n: u32, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..10 {
        f();
    }
    let (c0, w0) = (thread_cpu(), Instant::now());
    for _ in 0..n {
        f();
    }
    ((thread_cpu() - c0) / n, w0.elapsed() / n)
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// A process tree of `n` sleeping children under one shell, in its own group.
fn tree(n: usize) -> Child {
    use std::os::unix::process::CommandExt;
    let script = format!("{} wait", "sleep 600 & ".repeat(n));
    let child = Command::new("sh")
        .args(["-c", &script])
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    child
}

fn kill_tree(mut c: Child) {
    unsafe { libc::killpg(c.id() as i32, libc::SIGKILL) };
    let _ = c.wait();
}

/// A keep-alive HTTP server answering `/system_stats` like ComfyUI on one CUDA device.
fn comfy_stub() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = r#"{"system": {"os": "linux"}, "devices": [{"name": "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync", "type": "cuda", "index": 0, "vram_total": 25359810560, "vram_free": 15000000000, "torch_vram_total": 2000000000, "torch_vram_free": 67108864}]}"#;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                let mut line = String::new();
                loop {
                    let mut head = 0;
                    loop {
                        line.clear();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            _ if line == "\r\n" => break,
                            _ => head += 1,
                        }
                    }
                    if head == 0 {
                        return;
                    }
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    url
}

const STATE: &str = "# vrambisect fake GPU state v1
gpu0.used=9663676416
gpu0.cuda_context_bytes=300000000
gpu0.pcie_rx_kbps=5200000
gpu0.graphics_procs=998:52428800
";

struct Gpu {
    /// The fake, kept alive while in use; `None` with the real driver.
    fake: Option<gpu::FakeGpu>,
    nvml_lib: Option<PathBuf>,
}

fn gpu(tree_pid: u32) -> Gpu {
    if let Some(p) = std::env::var_os("VRAMBISECT_NVML_LIB") {
        return Gpu {
            fake: None,
            nvml_lib: Some(p.into()),
        };
    }
    if nvml_wrapper::Nvml::init().is_ok() {
        return Gpu {
            fake: None,
            nvml_lib: None,
        };
    }
    let fake = gpu::FakeGpu::build();
    fake.write_state(&format!(
        "{STATE}gpu0.procs={tree_pid}:8589934592,999:1073741824\n"
    ));
    // cudarc loads `libcuda.so` by name: the fake, opened first by path, is reused.
    let path = std::ffi::CString::new(fake.cuda_path().to_str().unwrap()).unwrap();
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "dlopen of the fake libcuda");
    let nvml_lib = Some(fake.nvml_path());
    Gpu {
        fake: Some(fake),
        nvml_lib,
    }
}

/// What one sample costs, backend by backend.
fn one_sample_per_backend(g: &Gpu, ctx: &Context, members: &[u32], root: u32) {
    println!("### One sample per backend\n");
    println!("| backend | CPU µs per sample | wall µs per sample |");
    println!("|---|---:|---:|");
    let row = |name: &str, (cpu, wall): (Duration, Duration)| {
        println!("| {name} | {} | {} |", us(cpu), us(wall));
    };

    let mut nvml = NvmlProbe::open(g.nvml_lib.as_deref(), Duration::from_millis(100), false)
        .expect("NVML")
        .probe;
    let mut out = vec![None; nvml.series().len()];
    row(
        "NVML (memory v2, compute + graphics processes; 1 GPU)",
        per_call(2000, || nvml.sample(ctx, &mut out)),
    );
    drop(nvml);

    let mut sys = SystemProbe::open().unwrap();
    let mut out = vec![None; sys.series().len()];
    let no_tree = Context { tree: &[], ..*ctx };
    row(
        "system (RAM, swap)",
        per_call(5000, || sys.sample(&no_tree, &mut out)),
    );
    row(
        &format!("system + process tree ({} processes)", members.len()),
        per_call(3000, || sys.sample(ctx, &mut out)),
    );
    let listing = per_call(200, || {
        let mut t = Tree::new(Some(root));
        t.refresh(Instant::now());
    });
    let procs = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .count();
    row(
        &format!(
            "tree membership: search among {procs} processes (every {} ms)",
            rescan_period(listing.0).as_millis()
        ),
        listing,
    );

    let mut cuda = CudaProbe::open(&[]).expect("CUDA").probe;
    let mut out = vec![None; cuda.series().len()];
    row(
        "CUDA (cuMemGetInfo, own context)",
        per_call(5000, || cuda.sample(ctx, &mut out)),
    );
    drop(cuda);

    let url = format!("{}/system_stats", comfy_stub());
    let agent = comfy::agent();
    row(
        "ComfyUI /system_stats (HTTP on loopback, keep-alive; at most 4 per second)",
        per_call(500, || {
            comfy::fetch(&agent, &url).unwrap();
        }),
    );

    let dir = tempfile::tempdir().unwrap();
    let series: Vec<_> = (0..30)
        .map(|i| vrambisect::sampler::probe::SeriesDef::bytes(format!("gpu0.s{i}")))
        .collect();
    let mut w = Writers::create(
        Some(&dir.path().join("w.csv")),
        Some(&dir.path().join("w.jsonl")),
    )
    .unwrap();
    w.header(&Header {
        format: "bench",
        started_unix_ms: 0,
        interval_ms: 1.0,
        series: &series,
    });
    let values: Vec<Option<i64>> = (0..30).map(|i| Some(9_663_676_416 + i)).collect();
    let mut t_us = 0;
    row(
        "writing one row (30 columns) to CSV + JSON lines",
        per_call(20000, || {
            t_us += 1000;
            w.sample(t_us, &values);
        }),
    );
    drop(w);
}

/// The sampler thread as `run` starts it, at each rate, and over a long run.
fn the_whole_sampler(g: &Gpu, root: u32) {
    println!("\n### The whole sampler\n");
    println!(
        "The sampler thread as `run` starts it, CSV and JSON lines on disk; CPU time of the \
         whole process (sampler thread, PCIe and ComfyUI pollers) over wall time, after 300 ms \
         of warm-up. Between samples the thread sleeps, so each sample starts with cold caches \
         and pays a wake-up; the first row measures that floor on this machine.\n"
    );
    println!("| rate | backends | samples | CPU µs per sample | CPU share of one core |");
    println!("|---:|---|---:|---:|---:|");
    // The floor: a thread doing nothing but sleeping for the interval. Returns the CPU share
    // of one core, in percent.
    let floor = |n: u32, quiet: bool| -> f64 {
        let (c0, w0) = (process_cpu(), Instant::now());
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(10));
        }
        let cpu = process_cpu() - c0;
        let share = cpu.as_secs_f64() / w0.elapsed().as_secs_f64() * 100.0;
        if !quiet {
            println!(
                "| 100 Hz | (a bare `sleep(10ms)` loop: the wake-up alone) | {n} | {} | {share:.2}% |",
                us(cpu / n)
            );
        }
        share
    };
    floor(500, false);
    #[derive(Clone, Copy, PartialEq)]
    enum Set {
        Bare,
        System,
        Tree,
        Nvml,
        Target,
        All,
    }
    // Prints a row unless `quiet`; returns the CPU share of one core, in percent.
    let run = |hz: u32, secs: u64, set: Set, quiet: bool| -> f64 {
        let dir = tempfile::tempdir().unwrap();
        let nvml = matches!(set, Set::Nvml | Set::Target | Set::All);
        let system = matches!(set, Set::System | Set::Tree | Set::Target | Set::All);
        let follow = matches!(set, Set::Tree | Set::Nvml | Set::Target | Set::All);
        let config = SamplerConfig {
            interval: Duration::from_secs(1) / hz,
            nvml,
            nvml_lib: g.nvml_lib.clone(),
            cuda: set == Set::All,
            comfy_url: (set == Set::All).then(comfy_stub),
            system,
            root_pid: follow.then_some(root),
            csv: Some(dir.path().join("s.csv")),
            jsonl: Some(dir.path().join("s.jsonl")),
        };
        let sampler = Sampler::start(config).unwrap();
        // Only the steady state: opening the probes is not a per-sample cost.
        std::thread::sleep(Duration::from_millis(300));
        let (c0, w0, n0) = (process_cpu(), Instant::now(), sampler.snapshot().samples);
        std::thread::sleep(Duration::from_secs(secs));
        let (c1, w1, n1) = (process_cpu(), Instant::now(), sampler.snapshot().samples);
        let s = sampler.stop();
        let cpu = c1 - c0;
        let n = (n1 - n0).max(1);
        let backends = match set {
            Set::Bare => "none: the loop alone (clock, wake-up, bookkeeping, files)",
            Set::System => "system (RAM, swap)",
            Set::Tree => "system + process tree",
            Set::Nvml => "NVML (with the tree's per-process figures)",
            Set::Target => "**NVML + system + process tree**",
            Set::All => "all: NVML + CUDA + ComfyUI + system + tree",
        };
        let share = cpu.as_secs_f64() / (w1 - w0).as_secs_f64() * 100.0;
        if !quiet {
            println!(
                "| {hz} Hz | {backends} | {n} | {} | {share:.2}% |",
                us(cpu / n as u32)
            );
        }
        // The fake NVML does not list this process, so the context's cost is not measured.
        assert!(
            s.unavailable.iter().all(|u| u.probe == "cuda.footprint"),
            "{:?}",
            s.unavailable
        );
        share
    };
    for set in [Set::Bare, Set::System, Set::Tree, Set::Nvml] {
        run(100, 4, set, false);
    }
    for hz in [10, 100, 1000] {
        run(hz, 5, Set::Target, false);
    }
    run(100, 5, Set::All, false);

    // One run of a few seconds moves by a few tenths of a percent on a shared machine: the
    // target is judged on the median of several, each next to a measurement of the floor.
    let repeats = 7;
    let (mut shares, mut floors, mut over) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        let f = floor(200, true);
        let s = run(100, 4, Set::Target, true);
        floors.push(f);
        shares.push(s);
        over.push(s - f);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (s, s_lo, s_hi) = median(&mut shares);
    let (f, f_lo, f_hi) = median(&mut floors);
    let (o, o_lo, o_hi) = median(&mut over);
    println!(
        "\nThe target (100 Hz, NVML + system + process tree), {repeats} more runs of 4 s, each \
         after 2 s of the bare sleep loop (median, lowest–highest):\n\n\
         | | CPU share of one core |\n|---|---:|\n\
         | **the sampler** | **{s:.2}%** ({s_lo:.2}–{s_hi:.2}%) |\n\
         | the bare sleep loop (the machine's wake-up floor) | {f:.2}% ({f_lo:.2}–{f_hi:.2}%) |\n\
         | the sampler over that floor | {o:.2}% ({o_lo:.2}–{o_hi:.2}%) |"
    );
    memory_over_a_long_run(g, root);
}

/// The sampler's memory as samples and marks pile up (`VRAMBISECT_BENCH_LONG_SECS`, default
/// 60).
fn memory_over_a_long_run(g: &Gpu, root: u32) {
    let secs: u64 = std::env::var("VRAMBISECT_BENCH_LONG_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    println!("\n### Memory over a long run\n");
    println!(
        "1000 Hz, NVML + system + tree, CSV and JSON lines on disk, `snapshot()` every \
         100 ms as a live display does; this process's resident memory as the samples pile \
         up. First without marks ({secs} s), then with a mark every 10 ms ({} s; the summary \
         keeps up to 10,000 marks).\n",
        secs / 3
    );
    println!("| samples | marks | RSS (KiB) | CSV + JSONL written (MiB) |");
    println!("|---:|---:|---:|---:|");
    let long_run = |secs: u64, with_marks: bool| {
        let dir = tempfile::tempdir().unwrap();
        let (csv, jsonl) = (dir.path().join("s.csv"), dir.path().join("s.jsonl"));
        let sampler = Sampler::start(SamplerConfig {
            interval: Duration::from_millis(1),
            nvml_lib: g.nvml_lib.clone(),
            root_pid: Some(root),
            csv: Some(csv.clone()),
            jsonl: Some(jsonl.clone()),
            ..SamplerConfig::default()
        })
        .unwrap();
        let start = Instant::now();
        let mut next_report = 1000;
        let mut marks = 0u32;
        let mut ticks = 0u32;
        let size = |p: &PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(10));
            ticks += 1;
            if with_marks {
                sampler.mark(&format!("node {} finished", marks % 40));
                marks += 1;
            }
            if !ticks.is_multiple_of(10) {
                continue;
            }
            let n = sampler.snapshot().samples;
            if n >= next_report {
                println!(
                    "| {n} | {marks} | {} | {:.1} |",
                    rss_kib().0,
                    (size(&csv) + size(&jsonl)) as f64 / (1 << 20) as f64
                );
                next_report *= if next_report < 10_000 { 10 } else { 2 };
            }
        }
        let s = sampler.stop();
        println!(
            "| {} (stopped) | {} kept | {} | {:.1} |",
            s.samples,
            s.marks.len(),
            rss_kib().0,
            (size(&csv) + size(&jsonl)) as f64 / (1 << 20) as f64
        );
    };
    long_run(secs, false);
    long_run(secs / 3, true);
}

fn main() {
    let children = 4;
    let t = tree(children);
    let root = t.id();
    let g = gpu(root);
    let which = if g.fake.is_some() {
        "fake (test bed)"
    } else {
        "real driver"
    };
    let mut members = Tree::new(Some(root));
    let members = members.refresh(Instant::now()).to_vec();
    assert_eq!(members.len(), children + 1, "tree {members:?}");
    let ctx = Context {
        tree: &members,
        root_pid: Some(root),
        self_pid: std::process::id(),
        now: Instant::now(),
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("## Sampler\n");
    println!("Machine: {cpus} CPUs; NVML/CUDA: {which}; tree: 1 shell + {children} children.\n");

    one_sample_per_backend(&g, &ctx, &members, root);
    the_whole_sampler(&g, root);
    kill_tree(t);
}
