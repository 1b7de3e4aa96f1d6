//! The machine itself: OS, kernel, CPU, RAM and swap.

use super::*;

// ---------------------------------------------------------------------------------------
// The machine

/// `PRETTY_NAME` (else `NAME VERSION`) from `/etc/os-release`.
pub(super) fn parse_os_release(text: &str) -> Option<String> {
    let mut fields: BTreeMap<&str, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"').trim_matches('\'').to_string();
            fields.insert(k.trim(), v);
        }
    }
    fields
        .get("PRETTY_NAME")
        .filter(|v| !v.is_empty())
        .cloned()
        .or_else(|| {
            let name = fields.get("NAME")?;
            Some(match fields.get("VERSION") {
                Some(v) => format!("{name} {v}"),
                None => name.clone(),
            })
        })
}

/// `model name` and the number of `processor` entries in `/proc/cpuinfo`.
pub(super) fn parse_cpuinfo(text: &str) -> Option<String> {
    let mut model = None;
    let mut count = 0;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "processor" => count += 1,
            // x86 says "model name"; some ARM kernels only say "Hardware" or "CPU part".
            "model name" | "Hardware" if model.is_none() => model = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let model = model.filter(|m| !m.is_empty())?;
    Some(if count > 0 {
        format!("{model} ({count} logical cores)")
    } else {
        model
    })
}

#[cfg(unix)]
fn uname() -> Option<String> {
    // SAFETY: utsname is plain data; uname fills it and NUL-terminates each field.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some(format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    ))
}

#[cfg(not(unix))]
fn uname() -> Option<String> {
    None
}

/// OS, kernel, CPU, RAM and swap of a machine.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub os: Item<String>,
    pub kernel: Item<String>,
    pub cpu: Item<String>,
    pub ram_bytes: Item<u64>,
    pub swap_bytes: Item<u64>,
}

/// OS, kernel, CPU, RAM and swap of this machine.
pub(super) fn machine() -> Host {
    let os = Item::first([
        opt(
            std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|t| parse_os_release(&t)),
            "/etc/os-release",
            "no /etc/os-release",
        ),
        opt(
            sysinfo::System::long_os_version().ok(),
            "sysinfo",
            "the OS does not say its name",
        ),
    ]);
    let kernel = Item::first([
        opt(uname(), "uname", "uname failed"),
        opt(
            sysinfo::System::kernel_version().ok(),
            "sysinfo",
            "the kernel version is not known",
        ),
    ]);
    let cpu = Item::first([
        opt(
            std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| parse_cpuinfo(&t)),
            "/proc/cpuinfo",
            "no model name in /proc/cpuinfo",
        ),
        sysinfo_cpu(),
    ]);
    let (ram, swap) = match std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| crate::sampler::system::parse_meminfo(&t))
    {
        Some(m) => (
            Item::found(m.total, "/proc/meminfo"),
            Item::found(m.swap_total, "/proc/meminfo"),
        ),
        None => match sysinfo::System::new() {
            Ok(mut s) => {
                s.refresh_memory();
                (
                    Item::found(s.total_memory(), "sysinfo"),
                    Item::found(s.total_swap(), "sysinfo"),
                )
            }
            Err(e) => (
                Item::missing(format!("cannot read memory: {e}")),
                Item::missing(format!("cannot read swap: {e}")),
            ),
        },
    };
    Host {
        os,
        kernel,
        cpu,
        ram_bytes: ram,
        swap_bytes: swap,
    }
}

fn sysinfo_cpu() -> Item<String> {
    match sysinfo::System::new() {
        Ok(mut s) => {
            s.refresh_cpu_all();
            let n = s.cpus().len();
            match s.cpus().first().map(|c| c.brand().trim().to_string()) {
                Some(b) if !b.is_empty() => {
                    Item::found(format!("{b} ({n} logical cores)"), "sysinfo")
                }
                _ => Item::missing("the CPU does not say its model"),
            }
        }
        Err(e) => Item::missing(format!("cannot read the CPU: {e}")),
    }
}
