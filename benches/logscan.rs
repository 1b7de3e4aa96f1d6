//! `vrambisect logscan` on a large generated log, next to `grep -E -c` with the same patterns
//! on the same file, in one run. `cargo bench --bench logscan` prints the table recorded in
//! BENCHMARKS.md; `LOGSCAN_BENCH_MB=1000` makes the log bigger, `LOGSCAN_BENCH_LOG=PATH` keeps
//! it.
//!
//! The log mixes what real ones hold: v0.38 starts with `[LEVEL]` tags and ANSI codes, 0.3.64
//! plain starts, ComfyUI-Manager timestamps, prompts with tqdm bars redrawn by `\r`, custom-node
//! chatter, and now and then a CUDA OOM with its traceback, a comfy-aimdo error or a TensorRT
//! allocator error. grep gets every pattern logscan looks for (the catalogue's signatures and
//! the structural lines, anchors dropped, translated to ERE), so both read every byte and
//! test every line; logscan then also classifies what it found.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A small deterministic generator (no dependency for this).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NOISE: &[&str] = &[
    "[Prompt Server] web root: /home/user/venv/lib/python3.12/site-packages/comfyui_frontend_package/static",
    "   0.0 seconds: /home/user/ComfyUI/custom_nodes/websocket_image_save.py",
    "   0.3 seconds: /home/user/ComfyUI/custom_nodes/ComfyUI-KJNodes",
    "Using pytorch attention",
    "[ComfyUI-Impact-Pack] Wildcards loading done.",
    "clip missing: ['clip_l.logit_scale', 'clip_l.transformer.text_projection.weight']",
    "FETCH ComfyRegistry Data: 45/102",
    "[rgthree-comfy] Loaded 48 exciting nodes. 🎉",
    "Warning: TorchScript type annotations are deprecated and will be removed in a future release.",
    "\u{1b}[32m[INFO]\u{1b}[0m Saving image to /home/user/ComfyUI/output/ComfyUI_00042_.png",
];

fn v038_start(w: &mut dyn Write) -> std::io::Result<()> {
    for line in [
        "Checkpoint files will always be loaded safely.",
        "Total VRAM 24564 MB, total RAM 64221 MB",
        "pytorch version: 2.10.0+cu130",
        "Set vram state to: NORMAL_VRAM",
        "Device: cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
        "Using async weight offloading with 2 streams",
        "Enabled pinned memory 26032.0",
        "DynamicVRAM support detected and enabled",
        "Python version: 3.12.3",
        "ComfyUI version: 0.38.1",
        "comfy-aimdo version: 0.5.5",
        "Using RAM pressure cache.",
        "Starting server",
        "",
        "To see the GUI go to: http://127.0.0.1:8188",
    ] {
        if line.is_empty() {
            writeln!(w)?;
        } else {
            writeln!(w, "\u{1b}[32m[INFO]\u{1b}[0m {line}")?;
        }
    }
    Ok(())
}

fn plain_start(w: &mut dyn Write, stamp: &str) -> std::io::Result<()> {
    for line in [
        "** ComfyUI startup time: 2026-08-21 21:00:00.125",
        "** Platform: Linux",
        "** ComfyUI Path: /srv/ComfyUI",
        "Checkpoint files will always be loaded safely.",
        "Total VRAM 24106 MB, total RAM 24106 MB",
        "pytorch version: 2.8.0+cu128",
        "Set vram state to: NORMAL_VRAM",
        "Device: cuda:0 NVIDIA GeForce RTX 3090 : native",
        "ComfyUI version: 0.30.1",
        "Starting server",
        "To see the GUI go to: http://127.0.0.1:8188",
    ] {
        writeln!(w, "{stamp}{line}")?;
    }
    Ok(())
}

fn bar(w: &mut dyn Write, steps: u64) -> std::io::Result<()> {
    for i in 0..=steps {
        let pct = 100 * i / steps;
        let fill = "█".repeat((i * 10 / steps) as usize);
        write!(
            w,
            "\r{pct:3}%|{fill:<10}| {i}/{steps} [00:{:02}<00:{:02},  3.71it/s]",
            i / 4,
            (steps - i) / 4
        )?;
    }
    writeln!(w)
}

fn prompt(w: &mut dyn Write, rng: &mut Lcg, tagged: bool) -> std::io::Result<()> {
    let t = if tagged {
        "\u{1b}[32m[INFO]\u{1b}[0m "
    } else {
        ""
    };
    writeln!(w, "{t}got prompt")?;
    writeln!(w, "{t}Requested to load SDXLClipModel")?;
    writeln!(
        w,
        "{t}Model SDXLClipModel prepared for dynamic VRAM loading. 1560MB Staged. 0 patches attached."
    )?;
    writeln!(w, "{t}Requested to load SDXL")?;
    writeln!(
        w,
        "{t}loaded completely; 22101.30 MB usable, 4897.05 MB loaded, full load: True"
    )?;
    for _ in 0..rng.below(30) {
        writeln!(w, "{}", NOISE[rng.below(NOISE.len() as u64) as usize])?;
    }
    bar(w, 20 + rng.below(20))?;
    match rng.below(200) {
        0 => {
            writeln!(
                w,
                "!!! Exception during processing !!! Allocation on device 0 would exceed allowed memory. (out of memory)"
            )?;
            writeln!(w, "Traceback (most recent call last):")?;
            writeln!(
                w,
                "  File \"/home/user/ComfyUI/execution.py\", line 527, in execute"
            )?;
            writeln!(
                w,
                "    output_data, output_ui, has_subgraph, has_pending_tasks = await get_output_data(prompt_id, unique_id, obj, input_data_all)"
            )?;
            writeln!(
                w,
                "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)"
            )?;
            writeln!(w, "Got an OOM, unloading all loaded models.")?;
        }
        1 => writeln!(
            w,
            "aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)"
        )?,
        2 => writeln!(
            w,
            "[TRT] [E] [defaultAllocator.cpp::allocate::19] Error Code 1: Cuda Runtime (out of memory)"
        )?,
        _ => {}
    }
    writeln!(w, "{t}Requested to load AutoencoderKL")?;
    writeln!(
        w,
        "{t}Model AutoencoderKL prepared for dynamic VRAM loading. 159MB Staged. 0 patches attached."
    )?;
    writeln!(
        w,
        "{t}\u{1b}[32mPrompt executed in {}.{:02} seconds\u{1b}[0m",
        rng.below(60),
        rng.below(100)
    )
}

/// Writes a log of at least `bytes` bytes.
fn generate(path: &Path, bytes: u64) -> std::io::Result<u64> {
    let file = std::fs::File::create(path)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut rng = Lcg(42);
    let mut counting = CountingWriter {
        inner: &mut w,
        n: 0,
    };
    while counting.n < bytes {
        match rng.below(3) {
            0 => v038_start(&mut counting)?,
            1 => plain_start(&mut counting, "")?,
            _ => plain_start(&mut counting, "[2026-08-21 21:00:00.125] ")?,
        }
        for _ in 0..(20 + rng.below(200)) {
            let tagged = rng.below(2) == 0;
            prompt(&mut counting, &mut rng, tagged)?;
        }
        writeln!(counting, "Stopped server")?;
    }
    let written = counting.n;
    w.flush()?;
    Ok(written)
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A Rust regular expression as POSIX ERE for grep: classes spelled out, `(?i)` as `[xX]`.
fn to_ere(pattern: &str) -> String {
    let (body, ci) = match pattern.strip_prefix("(?i)") {
        Some(rest) => (rest, true),
        None => (pattern, false),
    };
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('d') => out.push_str("[0-9]"),
                Some('w') => out.push_str("[[:alnum:]_]"),
                Some('s') => out.push_str("[[:space:]]"),
                Some('S') => out.push_str("[^[:space:]]"),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '(' if chars.peek() == Some(&'?') => {
                // `(?:` → `(`
                chars.next();
                chars.next();
                out.push('(');
            }
            '[' => {
                in_class = true;
                out.push(c);
            }
            ']' => {
                in_class = false;
                out.push(c);
            }
            c if ci && !in_class && c.is_ascii_alphabetic() => {
                out.push('[');
                out.push(c.to_ascii_lowercase());
                out.push(c.to_ascii_uppercase());
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// The best of `runs` wall times, in seconds, and the last run's output.
fn time(runs: usize, mut cmd: impl FnMut() -> Command) -> (f64, std::process::Output) {
    let mut best = f64::MAX;
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = cmd()
            .stdin(Stdio::null())
            .output()
            .expect("run the command");
        best = best.min(start.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.unwrap())
}

/// Runs `logscan` once, its JSON to `out`, and returns its peak resident memory in MiB (from
/// `wait4`, for this child alone).
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also gives its peak memory"
)]
fn logscan_peak_rss_mib(exe: &str, log: &Path, out: &Path) -> f64 {
    let child = Command::new(exe)
        .args(["logscan", "--json"])
        .arg(log)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).expect("output file"))
        .spawn()
        .expect("run logscan");
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; the kernel fills the structs we own.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    usage.ru_maxrss as f64 / 1024.0
}

fn main() {
    let mb: u64 = std::env::var("LOGSCAN_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = tempfile::tempdir().expect("temp dir");
    // LOGSCAN_BENCH_LOG=PATH keeps the generated log there (and reuses it when it exists).
    let log = match std::env::var_os("LOGSCAN_BENCH_LOG") {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.path().join("big-comfyui.log"),
    };
    let size = match std::fs::metadata(&log) {
        Ok(m) if std::env::var_os("LOGSCAN_BENCH_LOG").is_some() => m.len(),
        _ => generate(&log, mb << 20).expect("write the log"),
    };
    let patterns = dir.path().join("patterns.ere");
    let ere: Vec<String> = vrambisect::logscan::prefilter::patterns()
        .iter()
        .map(|p| to_ere(p))
        .collect();
    std::fs::write(&patterns, ere.join("\n") + "\n").expect("write the patterns");
    let mb_size = size as f64 / 1e6;
    eprintln!(
        "log: {:.0} MB, {} patterns ({})",
        mb_size,
        ere.len(),
        log.display()
    );
    // Read it once so every run finds it in the page cache (streamed: a forked child's peak
    // memory starts from this process's).
    let mut f = std::fs::File::open(&log).expect("open the log");
    std::io::copy(&mut f, &mut std::io::sink()).expect("read the log");

    let exe = env!("CARGO_BIN_EXE_vrambisect");
    let (t_scan, out) = time(3, || {
        let mut c = Command::new(exe);
        c.args(["logscan", "--json"]).arg(&log);
        c
    });
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("logscan JSON");
    let rss = logscan_peak_rss_mib(exe, &log, &dir.path().join("report.json"));
    let grep_locale = std::env::var("LC_ALL")
        .or_else(|_| std::env::var("LANG"))
        .unwrap_or_else(|_| "unset".into());
    let (t_grep, g) = time(3, || {
        let mut c = Command::new("grep");
        c.arg("-E").arg("-c").arg("-f").arg(&patterns).arg(&log);
        c
    });
    let (t_grep_c, gc) = time(3, || {
        let mut c = Command::new("grep");
        c.env("LC_ALL", "C")
            .arg("-E")
            .arg("-c")
            .arg("-f")
            .arg(&patterns)
            .arg(&log);
        c
    });
    let count = String::from_utf8_lossy(&g.stdout).trim().to_string();
    let count_c = String::from_utf8_lossy(&gc.stdout).trim().to_string();
    let fastest_grep = t_grep.min(t_grep_c);

    println!(
        "log: {:.0} MB, {} lines, {} server starts, {} prompts ({}), {} patterns",
        mb_size,
        doc["lines"],
        doc["starts_total"],
        doc["prompts_total"],
        doc["prompt_counts"],
        ere.len()
    );
    println!();
    println!("| tool | time (best of 3) | throughput | vs. fastest grep |");
    println!("|---|---|---|---|");
    println!(
        "| `vrambisect logscan --json` | {:.3} s | {:.0} MB/s | {:.2}× |",
        t_scan,
        mb_size / t_scan,
        fastest_grep / t_scan
    );
    println!(
        "| `grep -E -c -f patterns` ({grep_locale}) | {:.3} s | {:.0} MB/s | {:.2}× |",
        t_grep,
        mb_size / t_grep,
        fastest_grep / t_grep
    );
    println!(
        "| `LC_ALL=C grep -E -c -f patterns` | {:.3} s | {:.0} MB/s | {:.2}× |",
        t_grep_c,
        mb_size / t_grep_c,
        fastest_grep / t_grep_c
    );
    println!();
    println!(
        "logscan / fastest grep: {:.2} (target ≥ 0.5); logscan peak RSS {:.1} MiB; grep matched {count} lines ({count_c} with LC_ALL=C)",
        fastest_grep / t_scan,
        rss
    );
}
