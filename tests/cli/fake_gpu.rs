//! nvml-wrapper and cudarc, through their normal APIs, read what the fake libraries serve.

use crate::support;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::PcieUtilCounter;
use support::gpu::FakeGpu;

const STATE: &str = "\
# vrambisect fake GPU state v1
nvml_init=ok
cuda_init=ok
driver_version=580.82.07
cuda_driver_version=13000
device_count=2
gpu0.name=NVIDIA GeForce RTX 4090
gpu0.uuid=GPU-3f2c9a4e-0000-4000-8000-000000000001
gpu0.total=25757220864
gpu0.reserved=397410304
gpu0.used=9663676416
gpu0.free=15696134144
gpu0.cuda_total=25359810560
gpu0.cuda_free=15200000000
gpu0.pcie_rx_kbps=5200000
gpu0.pcie_tx_kbps=1000
gpu0.procs=4242:8589934592,999:1073741824
gpu1.name=NVIDIA GeForce RTX 3060
gpu1.total=12884901888
gpu1.used=0
";

fn nvml(gpu: &FakeGpu) -> Result<Nvml, nvml_wrapper::error::NvmlError> {
    Nvml::builder().lib_path(gpu.nvml_path().as_os_str()).init()
}

#[test]
fn nvml_wrapper_reads_the_state() {
    let gpu = FakeGpu::build();
    gpu.write_state(STATE);
    let nvml = nvml(&gpu).expect("init through the fake");
    assert_eq!(nvml.sys_driver_version().unwrap(), "580.82.07");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 13000);
    assert_eq!(nvml.device_count().unwrap(), 2);
    let dev = nvml.device_by_index(0).unwrap();
    assert_eq!(dev.name().unwrap(), "NVIDIA GeForce RTX 4090");
    assert_eq!(
        dev.uuid().unwrap(),
        "GPU-3f2c9a4e-0000-4000-8000-000000000001"
    );
    let mem = dev.memory_info().unwrap();
    assert_eq!(mem.total, 25757220864);
    assert_eq!(mem.reserved, 397410304);
    assert_eq!(mem.used, 9663676416);
    assert_eq!(mem.free, 15696134144);
    let procs = dev.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 2);
    assert_eq!(procs[0].pid, 4242);
    assert!(matches!(
        procs[0].used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Used(8589934592)
    ));
    assert_eq!(
        dev.pcie_throughput(PcieUtilCounter::Receive).unwrap(),
        5200000
    );
    let second = nvml.device_by_index(1).unwrap();
    assert_eq!(second.memory_info().unwrap().total, 12884901888);
    assert!(second.running_compute_processes().unwrap().is_empty());
}

#[test]
fn readings_follow_the_state_file_while_open() {
    let gpu = FakeGpu::build();
    gpu.write_state(STATE);
    let nvml = nvml(&gpu).unwrap();
    let dev = nvml.device_by_index(0).unwrap();
    assert_eq!(dev.memory_info().unwrap().used, 9663676416);
    gpu.write_state(&STATE.replace("gpu0.used=9663676416", "gpu0.used=1000"));
    assert_eq!(dev.memory_info().unwrap().used, 1000);
}

#[test]
fn missing_driver_is_an_error_not_a_panic() {
    let gpu = FakeGpu::build();
    // No state file: the fake behaves like a machine whose driver is not loaded.
    let Err(err) = nvml(&gpu) else {
        panic!("init must fail without a state file")
    };
    assert!(
        matches!(err, nvml_wrapper::error::NvmlError::DriverNotLoaded),
        "{err:?}"
    );
    let Err(err) = Nvml::builder()
        .lib_path(std::ffi::OsStr::new("/no/such/libnvidia-ml.so.1"))
        .init()
    else {
        panic!("init must fail without a library")
    };
    assert!(
        matches!(err, nvml_wrapper::error::NvmlError::LibloadingError(_)),
        "{err:?}"
    );
}

#[test]
fn cudarc_reads_the_state_in_a_context() {
    // cudarc keeps one libcuda per process; load the fake by absolute path first so its
    // own dlopen("libcuda.so") finds it. Only this test in this binary touches CUDA.
    let gpu = FakeGpu::build();
    gpu.write_state(&format!("{STATE}cuda_context_bytes=300000000\n"));
    let path = std::ffi::CString::new(gpu.cuda_path().to_str().unwrap()).unwrap();
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "dlopen of the fake libcuda");
    assert!(unsafe { cudarc::driver::sys::is_culib_present() });
    let ctx = cudarc::driver::CudaContext::new(0).expect("context on the fake");
    ctx.bind_to_thread().unwrap();
    let (free, total) = cudarc::driver::result::mem_get_info().unwrap();
    assert_eq!(total, 25359810560);
    assert_eq!(
        free,
        15200000000 - 300000000,
        "the context's own cost is visible"
    );
    assert_eq!(cudarc::driver::result::device::get_count().unwrap(), 2);
    drop(ctx);
}

#[test]
fn c_level_protocol_checks() {
    // The ctypes checks cover what the crates do not call (v1 memory info, error injection,
    // CUDA_VISIBLE_DEVICES, the INSUFFICIENT_SIZE protocol with odd counts).
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-gpu/smoke_test.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
