//! Holds a given amount of GPU memory for a while, through the CUDA driver API, and frees it:
//! the known load `scripts/gpu-check.sh` measures the sampler against.
//!
//! ```text
//! cuda_alloc SIZE DURATION [--device N]     e.g. cuda_alloc 4GiB 3s
//! ```
//!
//! It starts CUDA (`cuInit`), takes the device's primary context (as PyTorch does),
//! allocates SIZE with `cuMemAlloc` (not the stream-ordered pool, so the memory is the
//! driver's at once), writes every byte (`cuMemsetD8`) so the pages are really there, holds
//! it for DURATION, frees it and exits 0. It prints one line when the memory is held and one
//! when it is freed; a failure is one line on stderr and exit status 1 (2 for bad
//! arguments).

use cudarc::driver::{CudaContext, result};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use vrambisect::sampler::cuda::{driver_error_text, guarded};

const USAGE: &str = "usage: cuda_alloc SIZE DURATION [--device N]   (e.g. cuda_alloc 4GiB 3s)";

struct Args {
    bytes: u64,
    hold: Duration,
    device: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut free = Vec::new();
    let mut device = 0;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => {
                let v = it.next().ok_or("--device needs a number")?;
                device = v
                    .parse()
                    .map_err(|_| format!("--device {v}: not a device number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            _ => free.push(a),
        }
    }
    let [size, hold] = free.as_slice() else {
        return Err("give a size and a duration".into());
    };
    let bytes = vrambisect::size::parse_size(size)?;
    if bytes == 0 {
        return Err("the size must be above zero".into());
    }
    let hold = vrambisect::duration::parse_limit(hold)?;
    Ok(Args {
        bytes,
        hold,
        device,
    })
}

/// Allocates, touches, holds and frees; the error is one line.
fn hold_memory(args: &Args) -> Result<(), String> {
    let cuda = |what: &str, e: cudarc::driver::DriverError| {
        format!("CUDA: {what}: {}", driver_error_text(&e))
    };
    let bytes = usize::try_from(args.bytes).map_err(|_| "the size does not fit in memory")?;
    let ctx = CudaContext::new(args.device).map_err(|e| match e.0 {
        // cuInit's failure says it all ("no CUDA-capable device is detected").
        cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE
        | cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_INITIALIZED => {
            format!("CUDA: {}", driver_error_text(&e))
        }
        _ => cuda(&format!("no context on device {}", args.device), e),
    })?;
    ctx.bind_to_thread()
        .map_err(|e| cuda("cannot use the context", e))?;
    let name = ctx.name().unwrap_or_else(|_| "?".into());
    // SAFETY: a plain allocation in the current context, freed below before the context goes.
    let ptr = unsafe { result::malloc_sync(bytes) }
        .map_err(|e| cuda(&format!("cannot allocate {} bytes", args.bytes), e))?;
    let touched = unsafe { result::memset_d8_sync(ptr, 0xA5, bytes) };
    if let Err(e) = touched {
        let _ = unsafe { result::free_sync(ptr) };
        return Err(cuda("cannot write the allocation", e));
    }
    println!(
        "holding {} bytes on GPU {} ({name}) for {} ms (pid {})",
        args.bytes,
        args.device,
        args.hold.as_millis(),
        std::process::id()
    );
    let until = Instant::now() + args.hold;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    // SAFETY: `ptr` came from malloc_sync above and is freed once.
    unsafe { result::free_sync(ptr) }.map_err(|e| cuda("cannot free the allocation", e))?;
    println!("freed {} bytes", args.bytes);
    drop(ctx);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cuda_alloc: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: only dlopen/dlclose of the names cudarc looks for.
    let present = guarded(|| unsafe { cudarc::driver::sys::is_culib_present() });
    if present != Ok(true) {
        eprintln!("cuda_alloc: CUDA: libcuda not found: no NVIDIA driver here");
        return ExitCode::FAILURE;
    }
    match guarded(|| hold_memory(&args)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("cuda_alloc: {e}");
            ExitCode::FAILURE
        }
        Err(panic) => {
            eprintln!("cuda_alloc: CUDA: the CUDA library is broken: {panic}");
            ExitCode::FAILURE
        }
    }
}
