//! The catalogue of known failure signatures, as data.
//!
//! Every string the classifier looks for lives here, with what it means, which flags people
//! try against it and the upstream issues where it was reported (ComfyUI's tracker unless the
//! note says otherwise). Patterns are regular expressions matched against normalised log
//! lines and against the `exception_message` of an `execution_error`.

use crate::outcome::Outcome;
#[cfg(test)]
use regex::Regex;
use regex::RegexSet;
use std::sync::OnceLock;

/// Where a signature is looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the server is ready (startup and argparse).
    Startup,
    /// While a prompt runs.
    Prompt,
    /// Not a line signature: the last line of a prompt that the log leaves unfinished (a
    /// hang). [`match_line`] never returns these; `logscan` checks them where a prompt ends.
    Unfinished,
}

/// One known failure signature.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Signature {
    /// A stable id (`cuda_oom_native`).
    pub id: &'static str,
    pub outcome: Outcome,
    pub phase: Phase,
    /// A regular expression over one normalised line.
    pub pattern: &'static str,
    pub title: &'static str,
    /// What it means, for a person at 2 a.m.
    pub meaning: &'static str,
    /// Flags people try against it (the bisect toggles that test them).
    pub flags_to_try: &'static [&'static str],
    /// Upstream issue and PR numbers.
    pub issues: &'static [u32],
}

impl Signature {
    /// Whether the signature's line alone says how a prompt ended: a memory failure, or a node
    /// error the catalogue knows (a CUDA error, a full disk).
    pub fn ends_a_prompt(&self) -> bool {
        self.outcome.is_memory() || self.outcome == Outcome::NodeError
    }
}

/// The catalogue, most specific first within each outcome.
pub(crate) const SIGNATURES: &[Signature] = &[
    // --- startup -------------------------------------------------------------------------
    Signature {
        id: "argparse_rejected",
        outcome: Outcome::FlagRejected,
        phase: Phase::Startup,
        pattern: r"^main\.py: error: (unrecognized arguments:|argument .*: not allowed with argument|ambiguous option:|argument .*: invalid .* value:|argument .*: invalid choice:|argument .*: expected .*argument|argument .*: ignored explicit argument|--cache-ram accepts at most two values|--verbose expects)",
        title: "ComfyUI refused its flags",
        meaning: "argparse stopped ComfyUI before it loaded anything (exit 2): a flag this version does not know, two flags of one group, or a bad value",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "missing_comfy_aimdo",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"ModuleNotFoundError: No module named 'comfy_aimdo",
        title: "comfy-aimdo is not installed (or too old)",
        meaning: "ComfyUI imports comfy-aimdo unconditionally since early 2026; a partial update leaves it missing or out of step. Run 'pip install -r requirements.txt' with ComfyUI's Python",
        flags_to_try: &[],
        issues: &[12213, 14790],
    },
    Signature {
        id: "missing_module",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"ModuleNotFoundError: No module named '[^']+'",
        title: "a Python package is missing",
        meaning: "ComfyUI's Python lacks a package it imports; run 'pip install -r requirements.txt' with that Python",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "no_nvidia_driver",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"RuntimeError: Found no NVIDIA driver on your system",
        title: "no NVIDIA driver",
        meaning: "a CUDA build of PyTorch found no driver; ComfyUI does not fall back to the CPU (add --cpu, or fix the driver)",
        flags_to_try: &["--cpu"],
        issues: &[],
    },
    Signature {
        id: "no_cuda_gpu",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"RuntimeError: No CUDA GPUs are available",
        title: "no CUDA GPU visible",
        meaning: "PyTorch's CUDA build sees no GPU: hidden by CUDA_VISIBLE_DEVICES or --cuda-device, a container started without GPU access, or a driver (or ZLUDA) that does not serve this card; ComfyUI does not fall back to the CPU (make the GPU visible, or add --cpu)",
        flags_to_try: &["--cpu"],
        issues: &[],
    },
    Signature {
        id: "assets_db_in_use",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"^ASSETS_STARTUP_FAILED: \w+",
        title: "the assets database could not be opened",
        meaning: "another ComfyUI uses the same database, or it is locked or unwritable (kind after the colon)",
        flags_to_try: &["--disable-assets"],
        issues: &[],
    },
    Signature {
        id: "port_in_use",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        pattern: r"Port \d+ is already in use|OSError: \[Errno 98\] .*address already in use",
        title: "the port is taken",
        meaning: "another program listens on ComfyUI's port",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "desktop_start_failed",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        // ComfyUI Desktop's `main.log` when its Python server dies before it is ready
        // (`fixtures/logs/real/68-*`).
        pattern: r"Unhandled exception during server start",
        title: "ComfyUI Desktop's server did not start",
        meaning: "the Desktop app's Python process ended before the server was ready; its comfyui.log has the last lines ComfyUI wrote",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "launcher_start_failed",
        outcome: Outcome::StartupFailed,
        phase: Phase::Startup,
        // A front end that runs ComfyUI as its backend, saying the process ended before its
        // server was ready: SwarmUI (`Self-Start ComfyUI-6 on port 7821 failed. AutoRestart
        // ignored as this was an initial launch failure.`), AI Playground's failure report
        // (`Command: comfyui-backend startup` above `Exit Code: 1`), a pipeline's
        // `ComfyUI exited before it became ready. Exit code: 1`.
        pattern: r"AutoRestart ignored as this was an initial launch failure|^Command: comfyui-backend startup$|exited before it became ready",
        title: "ComfyUI ended before its server was ready",
        meaning: "the program that runs ComfyUI reports that ComfyUI's process ended while it started; the lines it relays (or ComfyUI's own user/comfyui.log) hold the cause",
        flags_to_try: &[],
        issues: &[],
    },
    // --- prompt: memory --------------------------------------------------------------------
    Signature {
        id: "cuda_oom_async",
        outcome: Outcome::Oom,
        phase: Phase::Prompt,
        // The async allocator's message, and its short forms: the `exception_message` of an
        // async OOM may be just `Allocation on device ` (`fixtures/logs/sig-cuda-oom-async-short.log`), which is all that the
        // `!!!` line and the frontend's error report then show.
        pattern: r"Allocation on device \S* ?would exceed allowed memory|torch\.(cuda\.)?OutOfMemoryError: Allocation on device|(Exception during processing !!!|Exception Message:\**) Allocation on device\b|^Allocation on device( \d+)?\s*$",
        title: "CUDA out of memory (cudaMallocAsync)",
        meaning: "PyTorch's cudaMallocAsync allocator could not get more VRAM",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--reserve-vram=1",
            "--vram-headroom=1",
            "--disable-cuda-malloc",
        ],
        issues: &[13598, 13210],
    },
    Signature {
        id: "gpu_oom_other_backend",
        outcome: Outcome::Oom,
        phase: Phase::Prompt,
        // PyTorch's wording on ROCm (`HIP out of memory`, also as `torch.OutOfMemoryError`),
        // Intel XPU (also the oneAPI runtime's own `UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`,
        // which a failed copy or kernel returns), Apple MPS, and torch-directml's own message (real pastes in
        // `fixtures/logs/real/3[0-5]-*`).
        pattern: r"HIP out of memory|XPU out of memory|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|MPS backend out of memory|Could not allocate tensor with \d+ bytes\. There is not enough GPU video memory available",
        title: "GPU out of memory (ROCm, XPU, MPS or DirectML)",
        meaning: "PyTorch could not allocate GPU memory on a non-CUDA backend; the CUDA allocator flags do not apply there",
        flags_to_try: &["--reserve-vram=1", "--disable-dynamic-vram", "--lowvram"],
        issues: &[13730],
    },
    Signature {
        id: "cuda_oom_native",
        outcome: Outcome::Oom,
        phase: Phase::Prompt,
        pattern: r"CUDA out of memory\. Tried to allocate|torch\.(cuda\.)?OutOfMemoryError",
        title: "CUDA out of memory",
        meaning: "PyTorch could not allocate VRAM for a tensor; with Dynamic VRAM this is often a model that no longer fits the estimate",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--reserve-vram=1",
            "--vram-headroom=1",
            "--disable-pinned-memory",
        ],
        issues: &[12823, 13210, 13598],
    },
    Signature {
        id: "comfyui_oom_handler",
        outcome: Outcome::Oom,
        phase: Phase::Prompt,
        // v0.38's handler also logs `Memory summary:` before PyTorch's table, which is all an
        // excerpt may keep (the table alone is not enough: anyone can print it).
        pattern: r"^Got an OOM, unloading all loaded models\.|This error means you ran out of memory on your GPU\.|^Memory summary:",
        title: "ComfyUI caught a GPU OOM",
        meaning: "ComfyUI's OOM handler ran and unloaded all models (the next run starts cold)",
        flags_to_try: &["--disable-dynamic-vram", "--reserve-vram=1"],
        issues: &[],
    },
    Signature {
        id: "accelerator_oom",
        outcome: Outcome::AcceleratorOom,
        phase: Phase::Prompt,
        // Also the frontend's error report (`Exception Message: CUDA error: out of memory`) and
        // older PyTorch, which raised the same CUDA error as a RuntimeError.
        pattern: r"AcceleratorError: (?:CUDA|HIP) error: out of memory|cudaErrorMemoryAllocation|hipErrorOutOfMemory|(: |Exception Message:\** |!!! |^)(?:CUDA|HIP) error: out of memory",
        title: "CUDA error: out of memory (AcceleratorError)",
        meaning: "a raw CUDA allocation failed outside PyTorch's allocator; ComfyUI before v0.38 did not even treat it as an OOM",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--reserve-vram=1",
            "--disable-async-offload",
        ],
        issues: &[10903],
    },
    Signature {
        id: "vbar_allocation_failed",
        outcome: Outcome::Vbar,
        phase: Phase::Prompt,
        pattern: r"VBAR allocation failed|MemoryError: VBAR OOM|Could not reseve Virtual Address space for VBAR",
        title: "VBAR allocation failed",
        meaning: "Dynamic VRAM could not reserve virtual address space for a model (seen on laptop GPUs)",
        flags_to_try: &["--disable-dynamic-vram"],
        issues: &[16225],
    },
    Signature {
        id: "aimdo_non_oom",
        outcome: Outcome::AimdoFault,
        phase: Phase::Prompt,
        // Also its buffers' own failures (`comfy_aimdo/vram_buffer.py`, the file reader that
        // copies weights to the device).
        pattern: r"VRAM Allocation failed \(non OOM\)|Fault failed: \d+|comfy-aimdo device \d+ is not initialized|RuntimeError: VRAM reservation failed|hostbuf_file_reader_read failed",
        title: "comfy-aimdo fault",
        meaning: "comfy-aimdo failed to fault weights into VRAM for a reason other than a plain OOM; often only on the second prompt",
        flags_to_try: &["--disable-dynamic-vram", "--disable-pinned-memory"],
        issues: &[15269, 12943],
    },
    Signature {
        id: "aimdo_compile_error",
        outcome: Outcome::AimdoFault,
        phase: Phase::Prompt,
        pattern: r"aimdo memory compile error",
        title: "comfy-aimdo memory compile error",
        meaning: "the model compiler's recorded allocation graph (comfy-aimdo) could not be compiled or replayed",
        flags_to_try: &["--disable-comfy-compiler", "--disable-dynamic-vram"],
        issues: &[],
    },
    Signature {
        id: "aimdo_error_line",
        outcome: Outcome::AimdoFault,
        phase: Phase::Prompt,
        pattern: r"^aimdo: \S+:\d+:(ERROR|CRITICAL):",
        title: "comfy-aimdo logged an error",
        meaning: "the Dynamic VRAM allocator reported an error; the prompt may still have finished",
        flags_to_try: &["--disable-dynamic-vram"],
        issues: &[12943, 15575],
    },
    Signature {
        id: "hostbuffer_failed",
        outcome: Outcome::HostOom,
        phase: Phase::Prompt,
        pattern: r"HostBuffer\.\w+ failed|:ERROR:.*hostbuf_grow",
        title: "pinned host buffer failure",
        meaning: "comfy-aimdo could not grow or read its pinned RAM buffer; reported on multi-GPU machines",
        flags_to_try: &[
            "--disable-pinned-memory",
            "--cuda-device=0",
            "--disable-dynamic-vram",
        ],
        issues: &[15255, 15591, 15575],
    },
    Signature {
        id: "windows_commit_limit",
        outcome: Outcome::HostOom,
        phase: Phase::Prompt,
        // Windows error 1455 (ERROR_COMMITMENT_LIMIT). The sentence is localized ("El archivo
        // de paginación es demasiado pequeño…", `fixtures/logs/real/11-*`): the code is what
        // is matched.
        pattern: r"\(os error 1455\)|\[WinError 1455\]|The paging file is too small for this operation",
        title: "Windows commit limit reached (RAM + page file)",
        meaning: "Windows could not commit more memory: on Windows 'out of RAM' is the commit limit, RAM plus the page file. Loading a large model is the usual moment; a bigger page file (System > Advanced > Performance > Virtual memory) or fewer programs open fixes it more often than a flag",
        flags_to_try: &["--disable-pinned-memory", "--cache-none", "--disable-mmap"],
        issues: &[],
    },
    Signature {
        id: "cpu_allocator",
        outcome: Outcome::HostOom,
        phase: Phase::Prompt,
        pattern: r"DefaultCPUAllocator: (can't allocate memory|not enough memory)|unable to mmap .*Cannot allocate memory|Unable to allocate [0-9.]+ [KMGTP]i?B for an array|^MemoryError\s*$|MemoryError: (?:Unable to allocate|cannot allocate memory)",
        title: "out of system RAM",
        meaning: "a node could not allocate system RAM; ComfyUI does not treat this as an OOM",
        flags_to_try: &["--disable-pinned-memory", "--cache-none", "--cache-ram=4"],
        issues: &[12332],
    },
    Signature {
        id: "tensorrt_allocator",
        outcome: Outcome::TensorrtAllocator,
        phase: Phase::Prompt,
        // The case of "Error code" and "Cuda" varies between TensorRT versions (`fixtures/logs/sig-tensorrt.log` and the cases below);
        // the file name and ComfyUI_TensorRT's own messages do not, which keeps the literal
        // part case-sensitive for `logscan`'s pre-filter. "Failed to load TensorRT engine" is
        // not one of them: TensorRT node packs print it for an engine built by another
        // TensorRT version too, which they rebuild (unseen batch-19, entry 28).
        pattern: r"[dD]efault[aA]llocator\.cpp.*(?i:error code 1: cuda runtime)|DefaultAllocator::allocate: \d+ \(out of memory\)|TensorRT has encountered an error|Requested amount of GPU memory \(\d+ bytes\) could not be allocated|Error Code 2: OutOfMemory",
        title: "TensorRT allocator error",
        meaning: "TensorRT's own CUDA allocator failed; its nodes ignore the result, so the prompt can 'succeed' with garbage output. Dynamic VRAM holding VRAM TensorRT cannot reclaim is the suspected cause",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--vram-headroom=2",
            "--reserve-vram=2",
        ],
        issues: &[],
    },
    // --- prompt: not memory -----------------------------------------------------------------
    // CUDA errors that memory features cause and memory flags fix, which are not "out of
    // memory": ComfyUI treats them as an ordinary node error; they are named with the flags
    // that test them. ROCm's PyTorch words them the same with `HIP` (`HIP error: invalid
    // argument`, `hipErrorInvalidValue`).
    Signature {
        id: "cuda_invalid_argument",
        outcome: Outcome::NodeError,
        phase: Phase::Prompt,
        pattern: r"(?:CUDA|HIP) error: invalid argument|cudaErrorInvalidValue|hipErrorInvalidValue|CUDA_ERROR_INVALID_VALUE",
        title: "CUDA error: invalid argument",
        meaning: "CUDA refused a call; since pinned memory became the default this is most often the pinned host buffers (cudaHostRegister) on laptops, WSL and some drivers, and sometimes async offload's streams",
        flags_to_try: &[
            "--disable-pinned-memory",
            "--disable-async-offload",
            "--disable-dynamic-vram",
        ],
        issues: &[10781],
    },
    Signature {
        id: "cuda_not_supported",
        outcome: Outcome::NodeError,
        phase: Phase::Prompt,
        pattern: r"(?:CUDA|HIP) error: operation not supported|cudaErrorNotSupported|hipErrorNotSupported|CUDA_ERROR_NOT_SUPPORTED",
        title: "CUDA error: operation not supported",
        meaning: "the driver does not support what was asked: most often the cudaMallocAsync allocator ComfyUI picks by default (older GPUs such as Maxwell, WSL, some containers and drivers), sometimes pinned memory",
        flags_to_try: &["--disable-cuda-malloc", "--disable-pinned-memory"],
        issues: &[2935],
    },
    Signature {
        id: "outputs_ignored",
        outcome: Outcome::InvalidWorkflow,
        phase: Phase::Prompt,
        pattern: r"^Output will be ignored",
        title: "outputs of the workflow failed validation",
        meaning: "ComfyUI refused some outputs of the prompt (a missing model or input, a value not in the list) and ran only the rest, often nothing: the lines before it name each problem; no memory flag changes this",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "cuda_no_kernel_image",
        outcome: Outcome::NodeError,
        phase: Phase::Prompt,
        pattern: r"CUDA error: no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice",
        title: "CUDA error: no kernel image for this GPU",
        meaning: "PyTorch or a node's library was built without this GPU's architecture (new cards such as the RTX 50 series need a build with sm_120): update it; no memory flag changes this",
        flags_to_try: &[],
        issues: &[],
    },
    Signature {
        id: "cuda_illegal_address",
        outcome: Outcome::NodeError,
        phase: Phase::Prompt,
        // ROCm's runtime reports the same fault as `Memory access fault by GPU node-1 (Agent
        // handle: …) on address …` and aborts the process.
        pattern: r"(?:CUDA|HIP) (?:error|warning): an illegal memory access was encountered|cudaErrorIllegalAddress|hipErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS|^Memory access fault by GPU node-\d+",
        title: "CUDA error: an illegal memory access",
        meaning: "a GPU kernel read or wrote memory it should not have (ROCm: a memory access fault by the GPU, which aborts the process); with weights moved asynchronously or faulted in by Dynamic VRAM, turning those off is the first test (a broken CUDA context fails every later call too: restart ComfyUI)",
        flags_to_try: &[
            "--disable-async-offload",
            "--disable-dynamic-vram",
            "--disable-pinned-memory",
        ],
        issues: &[],
    },
    Signature {
        id: "disk_full",
        outcome: Outcome::NodeError,
        phase: Phase::Prompt,
        pattern: r"\[Errno 28\] No space left on device|\[WinError 112\]",
        title: "the disk is full",
        meaning: "ComfyUI could not write a file (an output image, a cache, a temporary file): free disk space where its output, temp and user folders are; no memory flag changes this",
        flags_to_try: &[],
        issues: &[],
    },
    // --- process death ---------------------------------------------------------------------
    Signature {
        id: "oom_killer",
        outcome: Outcome::HostOom,
        phase: Phase::Prompt,
        // The kernel's own words (dmesg / journalctl -k), which launchers and users paste
        // next to ComfyUI's log; ComfyUI itself prints nothing when it is killed (#12332).
        pattern: r"Out of memory: Killed process \d+|invoked oom-killer|oom-kill:.*task=|oom_reaper: reaped process \d+",
        title: "the kernel's OOM killer stopped ComfyUI",
        meaning: "system RAM and swap ran out and Linux killed the biggest process (SIGKILL, exit 137); ComfyUI's own log just stops",
        flags_to_try: &["--disable-pinned-memory", "--cache-none", "--cache-ram=4"],
        issues: &[12332],
    },
    Signature {
        id: "killed",
        outcome: Outcome::Crash,
        phase: Phase::Prompt,
        // What a shell or launcher prints when its child dies of SIGKILL.
        pattern: r"^Killed$|^Killed: 9$|: line \d+: +\d+ Killed +|^\[\d+\]\+? +Killed +|^zsh: killed +|^(\[\d+\]\+? +)?\d+ +killed +\S|exited with code 137$",
        title: "ComfyUI was killed (SIGKILL)",
        meaning: "something killed ComfyUI from outside; on Linux that is most often the kernel's OOM killer when RAM and swap run out (look for 'Out of memory: Killed process' in 'dmesg' or 'journalctl -k')",
        flags_to_try: &["--disable-pinned-memory", "--cache-none", "--cache-ram=4"],
        issues: &[12332],
    },
    Signature {
        id: "hang_at_load",
        outcome: Outcome::Hang,
        phase: Phase::Unfinished,
        // #13730: the last line is `Requested to load LTXAV`, with no `loaded …` or
        // `… prepared for dynamic VRAM loading` after it.
        pattern: r"^Requested to load (\S+)",
        title: "hang while loading a model",
        meaning: "ComfyUI stalled moving a model into memory: the log stops after 'Requested to load' with no 'loaded …' or 'prepared for dynamic VRAM loading' line (reported on ROCm with Dynamic VRAM, pinned memory and async offload on, and on second generations with two GPUs)",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--disable-pinned-memory",
            "--disable-async-offload",
        ],
        issues: &[13730, 15255],
    },
    Signature {
        id: "process_exited",
        outcome: Outcome::Crash,
        phase: Phase::Prompt,
        // What is left when ComfyUI dies without a word: the portable build's `.bat` runs
        // `pause` after python returns (its echo `…>pause` and the localized prompt), and the
        // Desktop app logs the exit code (`fixtures/logs/real/01-*`, `02-*`, `24-*`).
        // Also whoever else reports the exit: supervisord (`exited: comfyui (exit status 139;
        // not expected)`), docker compose (`comfyui-1 exited with code 1`), systemd
        // (`Main process exited, code=dumped, status=11/SEGV`), the Desktop app
        // (`Process exited with code 3221225477`), SwarmUI (`Self-Start ComfyUI-3 unexpectedly
        // exited (ExitCode=-1073741819)`, `Self-Start ComfyUI-0 on port 7821 failed. Restarting…`), and any
        // report of Windows' crash codes as an exit code, signed or not: access violation
        // (0xC0000005), stack buffer overrun (0xC0000409), stack overflow (0xC00000FD), also
        // on a line of its own under `Process exit code:` (`-1073741819 (0xC0000005, …)`).
        pattern: r">pause$|^Press any key to continue \. \. \.|^[Pp]ress a key to continue|^请按任意键继续|[Pp]rocess exited with code -?[1-9]\d*|process exited \(exit code -?[1-9]\d*\)|进程已退出（退出代码 -?[1-9]\d*）|^ComfyUI has exited\.|exited: \S+ \(exit status [1-9]\d*; not expected\)|exited with code [1-9]\d*$|Main process exited, code=(?:dumped|killed|exited), status=[1-9]|unexpectedly exited \(ExitCode=-?[1-9]\d*\)|Self-Start \S+ on port \d+ failed\. Restarting|[Cc]ode:? ?=?-1073741819\b|[Cc]ode:? ?=?3221225477\b|[Cc]ode:? ?=?-1073740791\b|[Cc]ode:? ?=?3221226505\b|[Cc]ode:? ?=?-1073741571\b|[Cc]ode:? ?=?3221225725\b|^-?\d+ \(0x[Cc]0000(?:005|409|0[Ff][Dd])\b",
        title: "ComfyUI exited without a message",
        meaning: "the Python process ended while this prompt ran and printed nothing: a native crash (Windows access violation, 3221225477 = 0xC0000005) or the system ending it for memory",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--disable-pinned-memory",
            "--disable-async-offload",
        ],
        issues: &[],
    },
    Signature {
        id: "fatal_python_error",
        outcome: Outcome::Crash,
        phase: Phase::Prompt,
        // Also after a progress bar (`…it/s]Fatal Python error`) or a shell's `line 12: 4242`
        // (zsh's is lower case: `zsh: segmentation fault (core dumped)  python main.py`, and
        // it reports an abort, a bus error or an illegal instruction alike),
        // a faulthandler dump whose header the excerpt lost (its stacks' own headings), and
        // C++'s `std::terminate` on an exception thrown where none may be, a Metal assertion
        // (`file.mm:42: failed assertion` or `validateComputeFunctionArguments:819: failed
        // assertion`: macOS aborts), ZLUDA's access violation report, a Rust panic that aborts, and
        // PyTorch's Windows terminate handler (`Unhandled exception caught in
        // c10/util/AbortHandler.h`, then native frames).
        pattern: r"^Fatal Python error: |\]Fatal Python error: |^Segmentation fault|\]Segmentation fault|^(?:zsh: )?segmentation fault +\(core dumped\)|^zsh: (?:abort|segmentation fault|bus error|illegal hardware instruction|trace trap)(?: +\(core dumped\))? +\S|: line \d+: +\d+ +Segmentation fault|^Windows fatal exception: (access violation|stack overflow|code 0x)|^Stack \(most recent call first\):|^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):|^terminate called after throwing an instance of |:\d+: failed assertion [`']|^Exception Code: 0x[Cc]0000005|^panic in a function that cannot unwind|^Unhandled exception caught in c10/util/AbortHandler\.h",
        title: "ComfyUI crashed",
        meaning: "the Python process died in native code (abort, segfault, access violation)",
        flags_to_try: &[
            "--disable-dynamic-vram",
            "--disable-pinned-memory",
            "--disable-async-offload",
        ],
        issues: &[],
    },
];

struct Compiled {
    set: RegexSet,
    #[cfg(test)]
    each: Vec<Regex>,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| Compiled {
        set: RegexSet::new(SIGNATURES.iter().map(|s| s.pattern))
            .expect("catalogue patterns compile"),
        #[cfg(test)]
        each: SIGNATURES
            .iter()
            .map(|s| Regex::new(s.pattern).expect("catalogue pattern compiles"))
            .collect(),
    })
}

/// The line signatures one normalised line matches, in catalogue order ([`Phase::Unfinished`]
/// ones are not line signatures and never returned).
pub(crate) fn match_line(text: &str) -> impl Iterator<Item = &'static Signature> {
    compiled()
        .set
        .matches(text)
        .into_iter()
        .map(|i| &SIGNATURES[i])
        .filter(|s| s.phase != Phase::Unfinished)
}

/// The first signature of `phase` this line matches.
pub(crate) fn first_match(text: &str, phase: Phase) -> Option<&'static Signature> {
    match_line(text).find(|s| s.phase == phase)
}

/// Looks a signature up by id.
pub(crate) fn by_id(id: &str) -> Option<&'static Signature> {
    SIGNATURES.iter().find(|s| s.id == id)
}

/// The compiled single pattern of a signature (for tests that need captures).
#[cfg(test)]
pub(crate) fn regex_of(id: &str) -> Option<&'static Regex> {
    let i = SIGNATURES.iter().position(|s| s.id == id)?;
    Some(&compiled().each[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles_and_ids_are_unique() {
        assert_eq!(compiled().each.len(), SIGNATURES.len());
        let mut ids: Vec<_> = SIGNATURES.iter().map(|s| s.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), SIGNATURES.len());
    }

    #[test]
    fn lines_from_the_facts_classify() {
        // (line as ComfyUI or a library prints it, expected signature id)
        let cases: &[(&str, &str)] = &[
            (
                "main.py: error: unrecognized arguments: --no-such-flag",
                "argparse_rejected",
            ),
            (
                "main.py: error: argument --lowvram: not allowed with argument --highvram",
                "argparse_rejected",
            ),
            (
                "main.py: error: ambiguous option: --disable-cuda could match --disable-cuda-malloc, --disable-cuda-graphs",
                "argparse_rejected",
            ),
            (
                "main.py: error: argument --reserve-vram: invalid float value: 'abc'",
                "argparse_rejected",
            ),
            (
                "main.py: error: argument --reserve-vram: expected one argument",
                "argparse_rejected",
            ),
            (
                "main.py: error: argument --highvram: ignored explicit argument 'True'",
                "argparse_rejected",
            ),
            (
                "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 37.3 GiB for an array with shape (5000, 1000000) and data type float64",
                "cpu_allocator",
            ),
            ("MemoryError", "cpu_allocator"),
            (
                "ModuleNotFoundError: No module named 'comfy_aimdo'",
                "missing_comfy_aimdo",
            ),
            (
                "ModuleNotFoundError: No module named 'comfy_aimdo.vram_buffer'",
                "missing_comfy_aimdo",
            ),
            (
                "ModuleNotFoundError: No module named 'requests'",
                "missing_module",
            ),
            (
                "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
                "no_nvidia_driver",
            ),
            ("ASSETS_STARTUP_FAILED: in_use", "assets_db_in_use"),
            (
                "Port 8188 is already in use on address 127.0.0.1. Please close the other application or use a different port with --port.",
                "port_in_use",
            ),
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 7.96 GiB of which 33.64 MiB is free.",
                "cuda_oom_native",
            ),
            (
                "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)",
                "cuda_oom_async",
            ),
            (
                // The device index printed as a control character (`\x01`, shown as ☺).
                "Allocation on device \u{263a} would exceed allowed memory. (out of memory)",
                "cuda_oom_async",
            ),
            (
                "Got an OOM, unloading all loaded models.",
                "comfyui_oom_handler",
            ),
            (
                "torch.AcceleratorError: CUDA error: out of memory",
                "accelerator_oom",
            ),
            (
                "MemoryError: VBAR allocation failed",
                "vbar_allocation_failed",
            ),
            (
                "Could not reseve Virtual Address space for VBAR",
                "vbar_allocation_failed",
            ),
            (
                "aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)",
                "aimdo_non_oom",
            ),
            ("RuntimeError: Fault failed: 2", "aimdo_non_oom"),
            ("RuntimeError: VRAM reservation failed", "aimdo_non_oom"),
            (
                "RuntimeError: hostbuf_file_reader_read failed",
                "aimdo_non_oom",
            ),
            (
                "!!! Exception during processing !!! aimdo memory compile error",
                "aimdo_compile_error",
            ),
            (
                "terminate called after throwing an instance of 'c10::AcceleratorError'",
                "fatal_python_error",
            ),
            (
                "/AppleInternal/Library/BuildRoots/x/MPSCore/Types/MPSNDArray.mm:891: failed assertion `[MPSNDArray initWithBufferImpl]'",
                "fatal_python_error",
            ),
            ("Exception Code: 0xC0000005", "fatal_python_error"),
            ("RuntimeError: No CUDA GPUs are available", "no_cuda_gpu"),
            (
                "Memory access fault by GPU node-1 (Agent handle: 0x55e31981ed40) on address 0x7fa606fb0000. Reason: Page not present or supervisor privilege.",
                "cuda_illegal_address",
            ),
            (
                "torch.AcceleratorError: HIP error: invalid argument",
                "cuda_invalid_argument",
            ),
            (
                "Search for `hipErrorInvalidValue' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html for more information.",
                "cuda_invalid_argument",
            ),
            (
                "torch.AcceleratorError: HIP error: out of memory",
                "accelerator_oom",
            ),
            (
                "UserWarning: HIP warning: an illegal memory access was encountered",
                "cuda_illegal_address",
            ),
            (
                "Unhandled exception caught in c10/util/AbortHandler.h",
                "fatal_python_error",
            ),
            (
                "ComfyUI exited before it became ready. Exit code: 1",
                "launcher_start_failed",
            ),
            ("Command: comfyui-backend startup", "launcher_start_failed"),
            (
                "Self-Start ComfyUI-3 unexpectedly exited (ExitCode=-1073741819) (if something failed, change setting `LogLevel` to `Debug` to see why!)",
                "process_exited",
            ),
            (
                "[Error] Self-Start ComfyUI-0 on port 7821 failed. Restarting per configuration AutoRestart=true...",
                "process_exited",
            ),
            (
                "-1073741819 (0xC0000005, Access Violation)",
                "process_exited",
            ),
            ("exit code 3221226505", "process_exited"),
            (
                "panic in a function that cannot unwind",
                "fatal_python_error",
            ),
            (
                "aimdo: src/hostbuf.c:88:ERROR:hostbuf_grow: mmap failed",
                "aimdo_error_line",
            ),
            (
                "RuntimeError: HostBuffer.read_file_slice failed",
                "hostbuffer_failed",
            ),
            (
                "RuntimeError: [enforce fail at alloc_cpu.cpp:124] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4398046511104 bytes. Error code 12 (Cannot allocate memory)",
                "cpu_allocator",
            ),
            (
                "[defaultAllocator.cpp::allocate::19] Error code 1: Cuda Runtime (out of memory)",
                "tensorrt_allocator",
            ),
            (
                "defaultAllocator.cpp::nvinfer1::internal::DefaultAllocator::allocate::63] Error Code 1: Cuda Runtime (out of memory)",
                "tensorrt_allocator",
            ),
            (
                "[TRT] [E] Cuda Error in nvinfer1::internal::DefaultAllocator::allocate: 2 (out of memory)",
                "tensorrt_allocator",
            ),
            (
                "TensorRT has encountered an error. ErrorCode: 1. ErrorDesc: out of memory",
                "tensorrt_allocator",
            ),
            ("Fatal Python error: Aborted", "fatal_python_error"),
            (
                "!!! Exception during processing !!! Allocation on device ",
                "cuda_oom_async",
            ),
            (
                "- **Exception Message:** Allocation on device",
                "cuda_oom_async",
            ),
            ("Allocation on device 0", "cuda_oom_async"),
            (
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 8.00 GiB total capacity; 7.10 GiB already allocated; 0 bytes free; 7.31 GiB reserved in total by PyTorch)",
                "cuda_oom_native",
            ),
            (
                "- **Exception Message:** CUDA error: out of memory",
                "accelerator_oom",
            ),
            ("RuntimeError: CUDA error: out of memory", "accelerator_oom"),
            ("HostBuffer.truncate failed", "hostbuffer_failed"),
            (
                "[12345.678901] Out of memory: Killed process 4242 (python) total-vm:81234567kB, anon-rss:30123456kB",
                "oom_killer",
            ),
            (
                "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
                "oom_killer",
            ),
            ("Killed", "killed"),
            (
                "./run.sh: line 3: 4242 Killed                  python main.py --listen",
                "killed",
            ),
            ("zsh: killed     python main.py", "killed"),
            (
                "zsh: abort      python main.py --force-fp16",
                "fatal_python_error",
            ),
            (
                "zsh: illegal hardware instruction  python main.py",
                "fatal_python_error",
            ),
            (
                "validateComputeFunctionArguments:819: failed assertion `Compute Function(gather_kernel_1): missing buffer binding at index 2 for size[0].'",
                "fatal_python_error",
            ),
            (
                "Requested amount of GPU memory (1073741824 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.",
                "tensorrt_allocator",
            ),
        ];
        for (line, id) in cases {
            let hit = match_line(line).next().map(|s| s.id);
            assert_eq!(hit, Some(*id), "{line}");
        }
    }

    #[test]
    fn ordinary_lines_match_nothing() {
        for line in [
            "Requested to load SD1",
            "loaded completely; 6063.82 MB usable, 242.03 MB loaded, full load: True",
            "Prompt executed in 0.01 seconds",
            "aimdo: src/control.c:64:INFO:comfy-aimdo inited for GPU: NVIDIA GeForce RTX 5090 (VRAM: 32086 MB)",
            "Dynamic vram disabled with argument. If you have any issues with dynamic vram enabled please give us a detailed reports as this argument will be removed soon.",
            "usage: main.py [-h] [--listen [IP]] [--port PORT]",
            "Traceback (most recent call last):",
            "Allocation on device memory is tracked per model",
            "Killed 3 stale workers",
            "Seed: 32212254771",
            "Using seed 3221225477",
            "Self-Start ComfyUI-0 on port 7821 started.",
            "seed: 10737418190",
        ] {
            assert_eq!(match_line(line).count(), 0, "{line}");
        }
    }

    #[test]
    fn unfinished_signatures_are_not_line_signatures() {
        assert_eq!(match_line("Requested to load LTXAV").count(), 0);
        let hang = by_id("hang_at_load").expect("hang signature");
        assert_eq!(hang.phase, Phase::Unfinished);
        let caps = regex_of("hang_at_load")
            .unwrap()
            .captures("Requested to load LTXAV")
            .unwrap();
        assert_eq!(&caps[1], "LTXAV");
    }
}
