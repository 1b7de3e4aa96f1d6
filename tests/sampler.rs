//! The sampler through its library interface, against the fake NVML (in-process), a stub
//! ComfyUI `/system_stats`, and real child processes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::gpu::FakeGpu;
use support::sampling::{HttpStub, closed_port_url, fake_gpu, rss_of, system_stats, wait_until};
use vrambisect::sampler::{Sampler, SamplerConfig, Summary, rss_at};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Two GPUs; gpu0 runs the followed process (its pid is filled in) and one other process.
fn state(tree_pid: u32) -> String {
    format!(
        "# vrambisect fake GPU state v1
driver_version=580.82.07
cuda_driver_version=12080
gpu0.name=NVIDIA GeForce RTX 4090
gpu0.uuid=GPU-3f2c9a4e-0000-4000-8000-000000000001
gpu0.total=25757220864
gpu0.reserved=397410304
gpu0.used=9663676416
gpu0.cuda_free=15000000000
gpu0.pcie_rx_kbps=5200000
gpu0.pcie_tx_kbps=1000
gpu0.procs={tree_pid}:8589934592,999:1073741824
gpu0.graphics_procs=998:52428800,999:4096
gpu1.name=NVIDIA GeForce RTX 3060
gpu1.total=12884901888
gpu1.reserved=0
gpu1.used=1048576
"
    )
}

fn config(gpu: &FakeGpu) -> SamplerConfig {
    SamplerConfig {
        interval: Duration::from_millis(10),
        nvml_lib: Some(gpu.nvml_path()),
        ..SamplerConfig::default()
    }
}

/// A process to follow: sleeps until killed.
fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

fn value(s: &Summary, name: &str) -> (i64, i64, i64) {
    let st = s
        .get(name)
        .unwrap_or_else(|| panic!("no series {name}: {:#?}", s.series));
    (st.min, st.max, st.last)
}

fn has(s: &Summary, name: &str) -> bool {
    s.get(name).is_some()
}

/// Waits until `name` has a value.
fn wait_for(sampler: &Sampler, name: &str) {
    assert!(
        wait_until(Duration::from_secs(5), || has(&sampler.snapshot(), name)),
        "{name} never arrived: {:#?}",
        sampler.snapshot()
    );
}

#[test]
fn nvml_series_carry_the_fake_values() {
    let gpu = fake_gpu();
    let mut child = sleeper();
    gpu.write_state(&state(child.id()));
    let sampler = Sampler::start(SamplerConfig {
        root_pid: Some(child.id()),
        ..config(&gpu)
    })
    .unwrap();
    wait_for(&sampler, "gpu0.pcie.rx_kbps");
    wait_for(&sampler, "gpu0.tree.used");
    // The pressure rises while sampling; the peak must follow.
    gpu.write_state(&state(child.id()).replace("gpu0.used=9663676416", "gpu0.used=20000000000"));
    assert!(wait_until(Duration::from_secs(5), || {
        sampler
            .snapshot()
            .get("gpu0.nvml.used")
            .is_some_and(|s| s.max == 20_000_000_000)
    }));
    let s = sampler.stop();
    child.kill().unwrap();
    child.wait().unwrap();

    assert!(s.unavailable.is_empty(), "{:?}", s.unavailable);
    assert_eq!(s.driver_version.as_deref(), Some("580.82.07"));
    assert_eq!(s.cuda_driver_version.as_deref(), Some("12.8"));
    assert_eq!(s.devices.len(), 2);
    let d0 = &s.devices[0];
    assert_eq!(d0.name.as_deref(), Some("NVIDIA GeForce RTX 4090"));
    assert_eq!(
        d0.uuid.as_deref(),
        Some("GPU-3f2c9a4e-0000-4000-8000-000000000001")
    );
    assert_eq!(d0.total_bytes, Some(25757220864));
    assert_eq!(d0.reserved_bytes, Some(397410304));
    assert_eq!(d0.memory_info.as_deref(), Some("v2"));
    assert_eq!(
        s.devices[1].name.as_deref(),
        Some("NVIDIA GeForce RTX 3060")
    );

    assert_eq!(value(&s, "gpu0.nvml.used").0, 9663676416);
    assert_eq!(value(&s, "gpu0.nvml.used").1, 20_000_000_000);
    // free = total - reserved - used, as the fake derives it.
    assert_eq!(
        value(&s, "gpu0.nvml.free").1,
        25757220864 - 397410304 - 9663676416
    );
    assert_eq!(
        value(&s, "gpu0.nvml.reserved"),
        (397410304, 397410304, 397410304)
    );
    // The followed process vs everyone else (compute and graphics lists; 999 is in both and
    // counts once).
    assert_eq!(value(&s, "gpu0.tree.used").2, 8589934592);
    assert_eq!(value(&s, "gpu0.others.used").2, 1073741824 + 52428800);
    assert_eq!(value(&s, "gpu0.pcie.rx_kbps").2, 5200000);
    assert_eq!(value(&s, "gpu0.pcie.tx_kbps").2, 1000);
    assert_eq!(value(&s, "gpu1.nvml.used").2, 1048576);
    assert_eq!(value(&s, "gpu1.nvml.free").2, 12884901888 - 1048576);
    assert_eq!(value(&s, "gpu1.tree.used").2, 0);
    // No CUDA view was asked for and ComfyUI was not polled: no CUDA series, no derived one.
    assert!(
        !s.series.iter().any(|x| x.name.contains("cuda")),
        "{:?}",
        s.series
    );
    assert_eq!(s.cuda_context_bytes, None);
    assert_eq!(s.root_pid, Some(child.id()));
}

#[test]
fn comfyui_figures_and_the_nvml_cuda_disagreement() {
    let gpu = fake_gpu();
    gpu.write_state(&state(1));
    // ComfyUI sees 0.5 GiB more free than NVML (after taking torch's cache out).
    let nvml_free = 25757220864 - 397410304 - 9663676416;
    let torch_free = 64 * MIB;
    let cuda_free = nvml_free + GIB / 2;
    let stub = HttpStub::start(&system_stats(
        25359810560,
        cuda_free + torch_free,
        2 * GIB,
        torch_free,
    ));
    // The URL becomes known after the start, as it does for `run`.
    let sampler = Sampler::start(config(&gpu)).unwrap();
    sampler.set_comfy_url(&stub.url);
    wait_for(&sampler, "gpu0.nvml_minus_cuda");
    let s = sampler.stop();
    assert!(stub.hits() >= 1);
    assert_eq!(value(&s, "gpu0.comfy.vram_total").2, 25359810560);
    assert_eq!(
        value(&s, "gpu0.comfy.vram_free").2,
        (cuda_free + torch_free) as i64
    );
    assert_eq!(value(&s, "gpu0.comfy.torch_vram_total").2, (2 * GIB) as i64);
    assert_eq!(value(&s, "gpu0.comfy.torch_vram_free").2, torch_free as i64);
    assert_eq!(value(&s, "gpu0.nvml_minus_cuda").2, (GIB / 2) as i64);
    assert!(
        !has(&s, "gpu1.comfy.vram_free"),
        "ComfyUI listed one device"
    );
    assert_eq!(s.comfy_url.as_deref(), Some(stub.url.as_str()));
    assert!(s.unavailable.is_empty(), "{:?}", s.unavailable);
}

#[test]
fn comfyui_that_never_answers_is_one_line() {
    let url = closed_port_url();
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(10),
        nvml: false,
        comfy_url: Some(url.clone()),
        ..SamplerConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let s = sampler.stop();
    let comfy: Vec<_> = s
        .unavailable
        .iter()
        .filter(|u| u.probe == "comfy")
        .collect();
    assert_eq!(comfy.len(), 1, "{:?}", s.unavailable);
    assert!(comfy[0].reason.starts_with("ComfyUI never answered at"));
    assert!(comfy[0].reason.contains(&url));
    assert!(has(&s, "ram.available"), "the other probes go on");
}

#[test]
fn comfyui_on_the_cpu_is_not_gpu_memory() {
    let body =
        std::fs::read_to_string(support::fixture("captures/http/system_stats.json")).unwrap();
    let stub = HttpStub::start(&body);
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(10),
        nvml: false,
        comfy_url: Some(stub.url.clone()),
        ..SamplerConfig::default()
    })
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || stub.hits() >= 2));
    let s = sampler.stop();
    assert!(!s.series.iter().any(|x| x.name.contains("comfy")));
    let notes: Vec<_> = s
        .unavailable
        .iter()
        .filter(|u| u.probe == "comfy")
        .collect();
    assert_eq!(notes.len(), 1, "said once: {:?}", s.unavailable);
    assert!(notes[0].reason.contains("CPU"));
}

#[test]
fn missing_nvml_is_one_line_and_the_rest_goes_on() {
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(5),
        nvml_lib: Some("/no/such/dir/libnvidia-ml.so.1".into()),
        ..SamplerConfig::default()
    })
    .unwrap();
    wait_for(&sampler, "ram.available");
    let s = sampler.stop();
    assert_eq!(s.unavailable.len(), 1, "{:?}", s.unavailable);
    assert_eq!(s.unavailable[0].probe, "nvml");
    assert!(
        s.unavailable[0]
            .reason
            .starts_with("cannot load /no/such/dir/libnvidia-ml.so.1"),
        "{}",
        s.unavailable[0].reason
    );
    assert!(!s.unavailable[0].reason.contains('\n'));
    assert!(s.devices.is_empty());
    assert!(value(&s, "ram.total").2 > 0);
    assert!(value(&s, "ram.available").2 > 0);
    assert!(has(&s, "swap.used"));
}

#[test]
fn driver_not_loaded_is_one_line() {
    let gpu = fake_gpu(); // no state file: the fake behaves like an unloaded driver
    let s = Sampler::start(config(&gpu)).unwrap().stop();
    assert_eq!(s.unavailable.len(), 1, "{:?}", s.unavailable);
    assert!(s.unavailable[0].reason.contains("driver is not loaded"));
}

#[test]
fn partial_nvml_failures_are_noted_once_each() {
    let gpu = fake_gpu();
    gpu.write_state(&format!(
        "{}fail.nvmlDeviceGetMemoryInfo_v2=not_supported
fail.nvmlDeviceGetPcieThroughput=not_supported
gpu1.fail.nvmlDeviceGetComputeRunningProcesses_v3=no_permission
",
        state(1)
    ));
    let sampler = Sampler::start(SamplerConfig {
        root_pid: Some(std::process::id()),
        ..config(&gpu)
    })
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        let s = sampler.snapshot();
        s.samples >= 20
            && s.unavailable
                .iter()
                .filter(|u| u.probe == "nvml.pcie")
                .count()
                == 2
    }));
    let s = sampler.stop();
    let count = |p: &str| s.unavailable.iter().filter(|u| u.probe == p).count();
    // v1 on both devices, PCIe on both, the process list on gpu1: each said once.
    assert_eq!(count("nvml.reserved"), 2, "{:#?}", s.unavailable);
    assert_eq!(count("nvml.pcie"), 2, "{:#?}", s.unavailable);
    assert_eq!(count("nvml.processes"), 1, "{:#?}", s.unavailable);
    assert_eq!(s.unavailable.len(), 5, "{:#?}", s.unavailable);
    assert_eq!(s.devices[0].memory_info.as_deref(), Some("v1"));
    assert_eq!(s.devices[0].reserved_bytes, None);
    // v1 `used` counts the reserve.
    assert_eq!(value(&s, "gpu0.nvml.used").2, 9663676416 + 397410304);
    assert!(!has(&s, "gpu0.nvml.reserved"));
    assert!(!has(&s, "gpu0.pcie.rx_kbps"));
    assert!(has(&s, "gpu0.others.used"));
    assert!(!has(&s, "gpu1.others.used"));
}

#[test]
fn wddm_style_process_figures_are_noted_once() {
    let gpu = fake_gpu();
    gpu.write_state("# vrambisect fake GPU state v1\ngpu0.used=1000\ngpu0.procs=4242:na,4243:na\n");
    let sampler = Sampler::start(SamplerConfig {
        root_pid: Some(std::process::id()),
        ..config(&gpu)
    })
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || sampler
        .snapshot()
        .samples
        >= 5));
    let s = sampler.stop();
    assert_eq!(s.unavailable.len(), 1, "{:#?}", s.unavailable);
    assert!(s.unavailable[0].reason.contains("WDDM"));
    assert!(!has(&s, "gpu0.tree.used"));
    assert_eq!(value(&s, "gpu0.nvml.used").2, 1000);
}

/// `sh` starting two Python children that each hold a known amount of anonymous memory.
fn tree_of_two(a_mb: u64, b_mb: u64) -> (Child, Vec<u32>) {
    let py = |mb: u64| {
        format!(
            "python3 -c \"import os,time; x=b'\\x01'*({mb}*1024*1024); \
             os.write(1, b'%d\\n' % os.getpid()); time.sleep(60)\""
        )
    };
    let script = format!("{} & {} & wait", py(a_mb), py(b_mb));
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // One write(2) per child: the two lines cannot interleave.
    let pids = (0..2)
        .map(|_| {
            let line = lines.next().expect("a pid line").unwrap();
            line.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{e}: {line:?}"))
        })
        .collect();
    (child, pids)
}

fn kill_group(child: &mut Child, pids: &[u32]) {
    for &p in pids {
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_process_tree_is_summed_over_its_children() {
    let (mut sh, kids) = tree_of_two(40, 60);
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(10),
        nvml: false,
        root_pid: Some(sh.id()),
        ..SamplerConfig::default()
    })
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        sampler
            .snapshot()
            .get("tree.procs")
            .is_some_and(|s| s.last == 3)
    }));
    let expected: u64 = [sh.id(), kids[0], kids[1]].iter().map(|&p| rss_of(p)).sum();
    let s = sampler.stop();
    kill_group(&mut sh, &kids);

    assert_eq!(value(&s, "tree.procs").2, 3);
    let rss = value(&s, "tree.rss").2 as u64;
    // Same figures as /proc read here, up to what the interpreters touched meanwhile.
    assert!(
        rss.abs_diff(expected) < 8 * MIB,
        "tree {rss} vs /proc {expected}"
    );
    assert!(rss > 100 * MIB, "both children's 40 + 60 MiB count: {rss}");
    assert!(
        rss > rss_of(kids[0]) + rss_of(kids[1]),
        "the shell counts too"
    );
    let anon = value(&s, "tree.rss_anon").2 as u64;
    assert!(
        anon >= 100 * MIB,
        "the buffers are anonymous memory: {anon}"
    );
    let file = value(&s, "tree.rss_file").2 as u64;
    assert!(file > 0 && file < rss, "interpreters map files: {file}");
    assert!(has(&s, "tree.swap") && has(&s, "tree.rss_shmem"));
}

#[test]
fn ram_kept_after_a_prompt_between_two_marks() {
    // A "ComfyUI" that allocates when told to and keeps it.
    let mut py = Command::new("python3")
        .args([
            "-c",
            "import sys\nkeep=[]\nfor line in sys.stdin:\n    keep.append(b'\\x01'*(int(line)*1024*1024))\n    print('ok', flush=True)\n",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = py.stdin.take().unwrap();
    let mut answers = BufReader::new(py.stdout.take().unwrap()).lines();
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(5),
        nvml: false,
        ..SamplerConfig::default()
    })
    .unwrap();
    sampler.set_root_pid(py.id());
    // Warm up (the interpreter's own start-up growth is not the prompt's).
    writeln!(stdin, "1").unwrap();
    assert_eq!(answers.next().unwrap().unwrap(), "ok");
    wait_for(&sampler, "tree.rss");
    let samples = |s: &Sampler| s.snapshot().samples;
    let n = samples(&sampler);
    assert!(wait_until(Duration::from_secs(5), || samples(&sampler) > n + 1));
    sampler.mark("prompt 1 started");
    writeln!(stdin, "80").unwrap();
    assert_eq!(answers.next().unwrap().unwrap(), "ok");
    let n = samples(&sampler);
    assert!(wait_until(Duration::from_secs(5), || samples(&sampler) > n + 1));
    sampler.mark("prompt 1 finished");
    let n = samples(&sampler);
    assert!(wait_until(Duration::from_secs(5), || samples(&sampler) > n + 1));
    let s = sampler.stop();
    drop(stdin);
    let _ = py.wait();

    assert_eq!(s.marks.len(), 2);
    assert!(s.marks[0].t_ms < s.marks[1].t_ms);
    assert!(!s.marks[1].after.is_empty(), "a sample followed the mark");
    let kept = (rss_at(&s.marks, "prompt 1 finished").unwrap()
        - rss_at(&s.marks, "prompt 1 started").unwrap()) as u64;
    assert!(
        kept.abs_diff(80 * MIB) < 6 * MIB,
        "80 MiB kept, measured {kept}"
    );
    // Anonymous memory alone, where the platform splits it: what cannot be reclaimed.
    let anon = |label: &str| {
        s.marks
            .iter()
            .find(|m| m.label == label)
            .and_then(|m| m.before.get("tree.rss_anon").copied())
            .unwrap()
    };
    assert!((anon("prompt 1 finished") - anon("prompt 1 started")) as u64 > 75 * MIB);
}

#[test]
fn the_default_configuration_opens_no_cuda_context() {
    let c = SamplerConfig::default();
    assert!(
        !c.cuda,
        "a CUDA context costs VRAM on the card being measured"
    );
    assert_eq!(c.interval, Duration::from_millis(100));
    assert!(c.nvml && c.system);
    assert_eq!(
        (c.comfy_url, c.root_pid, c.csv, c.jsonl),
        (None, None, None, None)
    );
    // Started as `run` will start it: no CUDA series, no CUDA footprint, and libcuda is not
    // even loaded into this process.
    let gpu = fake_gpu();
    gpu.write_state(&state(1));
    let s = Sampler::start(SamplerConfig {
        nvml_lib: Some(gpu.nvml_path()),
        ..SamplerConfig::default()
    })
    .unwrap()
    .stop();
    assert!(!s.series.iter().any(|x| x.name.contains(".cuda.")));
    assert!(!s.unavailable.iter().any(|u| u.probe.starts_with("cuda")));
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(!maps.contains("libcuda"), "libcuda was loaded");
}

#[test]
fn works_at_one_millisecond() {
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(1),
        nvml: false,
        root_pid: Some(std::process::id()),
        ..SamplerConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let s = sampler.stop();
    // A loaded machine misses ticks; it never takes more than one per millisecond.
    assert!(s.samples >= 20, "{} samples in 200 ms", s.samples);
    assert!(
        s.samples as f64 <= s.duration_ms + 2.0,
        "{} samples in {} ms",
        s.samples,
        s.duration_ms
    );
    // Every tick is either sampled or counted as missed (plus the sample taken at stop).
    let ticks = s.samples + s.missed_ticks;
    assert!(
        ticks.abs_diff(s.duration_ms as u64) <= 2,
        "{ticks} ticks in {} ms",
        s.duration_ms
    );
    assert_eq!(s.interval_ms, 1.0);
}

/// Splits one CSV line, honouring quotes.
fn csv_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cells.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(String::new()),
            (c, _) => cells.last_mut().unwrap().push(c),
        }
    }
    cells
}

/// Reads back a CSV and a JSON-lines file and checks every line is complete and well-formed.
fn check_files(csv: &std::path::Path, jsonl: &std::path::Path, finished: bool) -> (usize, usize) {
    let text = std::fs::read_to_string(csv).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "CSV ends on a full line"
    );
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    assert_eq!(header[0], "t_ms");
    assert_eq!(*header.last().unwrap(), "mark");
    let mut rows = 0;
    let mut last_t = -1.0;
    for l in lines {
        let cells = csv_cells(l);
        assert_eq!(cells.len(), header.len(), "row {l}");
        let t: f64 = cells[0].parse().unwrap();
        assert!(t >= last_t, "time goes forward");
        last_t = t;
        rows += 1;
    }
    let text = std::fs::read_to_string(jsonl).unwrap();
    assert!(text.ends_with('\n'));
    let docs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(docs[0]["type"], "header");
    assert_eq!(
        docs[0]["series"].as_array().unwrap().len(),
        header.len() - 2
    );
    if finished {
        assert_eq!(docs.last().unwrap()["type"], "end");
    }
    (rows, docs.len())
}

#[test]
fn stopped_at_any_moment_the_files_are_valid() {
    for delay_ms in [0, 1, 2, 5, 13, 40] {
        let dir = tempfile::tempdir().unwrap();
        let (csv, jsonl) = (dir.path().join("s.csv"), dir.path().join("s.jsonl"));
        let sampler = Sampler::start(SamplerConfig {
            interval: Duration::from_millis(1),
            nvml: false,
            root_pid: Some(std::process::id()),
            csv: Some(csv.clone()),
            jsonl: Some(jsonl.clone()),
            ..SamplerConfig::default()
        })
        .unwrap();
        sampler.mark("a, \"quoted\" mark");
        std::thread::sleep(Duration::from_millis(delay_ms));
        let s = sampler.stop();
        let (rows, docs) = check_files(&csv, &jsonl, true);
        let text = std::fs::read_to_string(&csv).unwrap();
        let mark_row = text.lines().find(|l| l.ends_with('"')).unwrap();
        assert_eq!(csv_cells(mark_row).last().unwrap(), "a, \"quoted\" mark");
        // Every sample and the mark; header and end lines in the JSON.
        assert_eq!(rows as u64, s.samples + 1, "after {delay_ms} ms");
        assert_eq!(docs as u64, s.samples + 3, "after {delay_ms} ms");
        assert_eq!(s.csv.as_deref(), Some(csv.as_path()));
    }
}

#[test]
fn marks_reach_the_files_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, jsonl) = (dir.path().join("s.csv"), dir.path().join("s.jsonl"));
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(2),
        nvml: false,
        csv: Some(csv.clone()),
        jsonl: Some(jsonl.clone()),
        ..SamplerConfig::default()
    })
    .unwrap();
    for i in 0..20 {
        sampler.mark(&format!("node {i} finished"));
        std::thread::sleep(Duration::from_micros(700));
    }
    let s = sampler.stop();
    check_files(&csv, &jsonl, true);
    assert_eq!(s.marks.len(), 20);
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let marks: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "mark")
        .map(|v| v["label"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = (0..20).map(|i| format!("node {i} finished")).collect();
    assert_eq!(marks, want);
}

#[test]
fn an_unwritable_output_is_an_error_naming_it() {
    let e = Sampler::start(SamplerConfig {
        nvml: false,
        csv: Some("/no/such/dir/samples.csv".into()),
        ..SamplerConfig::default()
    })
    .err()
    .unwrap();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("/no/such/dir/samples.csv"), "{e}");
}

#[test]
fn a_mark_right_before_stop_gets_its_after_figures() {
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_secs(3600),
        nvml: false,
        root_pid: Some(std::process::id()),
        ..SamplerConfig::default()
    })
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || sampler
        .snapshot()
        .samples
        == 1));
    sampler.mark("prompt finished");
    let s = sampler.stop();
    assert_eq!(
        s.samples, 2,
        "the first sample and the one taken when stopping"
    );
    assert!(s.marks[0].after.contains_key("tree.rss"), "{:?}", s.marks);
    assert!(
        s.marks[0].before.contains_key("ram.available"),
        "{:?}",
        s.marks
    );
}
