//! ComfyUI's own GPU memory on Windows. Under WDDM (every consumer card on Windows) NVML
//! gives no per-process memory, by design; Windows itself counts it in the performance
//! counters `\GPU Process Memory(*)\Dedicated Usage` (VRAM) and `Shared Usage` (system
//! memory the GPU uses: where the CUDA Sysmem Fallback spills). Their instances are named
//! `pid_1234_luid_0x00000000_0x0000C3F1_phys_0`, one per process and adapter; a process that
//! holds no GPU memory has none, so a missing instance is a true zero once the counters
//! answer at all.
//!
//! The counters are read on their own thread (collecting them takes milliseconds), every
//! quarter second.

/// The pid of a `GPU Process Memory` instance name.
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) fn instance_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("pid_")?;
    let end = rest.find('_').unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The sum of the counter over the instances of the processes in `tree` (sorted).
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) fn tree_sum(items: &[(String, i64)], tree: &[u32]) -> i64 {
    items
        .iter()
        .filter(|(name, _)| instance_pid(name).is_some_and(|p| tree.binary_search(&p).is_ok()))
        .map(|(_, v)| (*v).max(0))
        .sum()
}

#[cfg(windows)]
pub(crate) use probe::WddmProbe;

#[cfg(windows)]
mod probe {
    use super::super::poller::Poller;
    use super::super::probe::{Context, Probe, SeriesDef, Unavailable};
    use super::super::series;
    use super::tree_sum;
    use std::time::Duration;
    use windows_sys::Win32::System::Performance::{
        PDH_MORE_DATA, PDH_RAW_COUNTER_ITEM_W, PdhAddEnglishCounterW, PdhCloseQuery,
        PdhCollectQueryData, PdhGetRawCounterArrayW, PdhOpenQueryW,
    };

    /// Every instance of both counters, at one moment.
    type Reading = (Vec<(String, i64)>, Vec<(String, i64)>);

    /// The PDH query and its two counters (handles, used by the poller thread only).
    struct Query {
        query: isize,
        dedicated: isize,
        shared: isize,
    }

    // SAFETY: the handles are used from one thread at a time (the poller's).
    unsafe impl Send for Query {}

    impl Drop for Query {
        fn drop(&mut self) {
            // SAFETY: the query handle came from PdhOpenQueryW and is closed once.
            unsafe {
                PdhCloseQuery(self.query as _);
            }
        }
    }

    fn wide(s: &str) -> Vec<u16> {
        s.encode_utf16().chain(std::iter::once(0)).collect()
    }

    impl Query {
        fn open() -> Result<Query, String> {
            // SAFETY: out-pointers to locals; paths are NUL-terminated wide strings.
            unsafe {
                let mut query = std::ptr::null_mut();
                let rc = PdhOpenQueryW(std::ptr::null(), 0, &mut query);
                if rc != 0 {
                    return Err(format!("cannot open a performance query (PDH 0x{rc:08x})"));
                }
                let mut q = Query {
                    query: query as isize,
                    dedicated: 0,
                    shared: 0,
                };
                for (path, slot) in [
                    (r"\GPU Process Memory(*)\Dedicated Usage", &mut q.dedicated),
                    (r"\GPU Process Memory(*)\Shared Usage", &mut q.shared),
                ] {
                    let mut counter = std::ptr::null_mut();
                    let rc = PdhAddEnglishCounterW(query, wide(path).as_ptr(), 0, &mut counter);
                    if rc != 0 {
                        return Err(format!(
                            "Windows has no {path} counter (PDH 0x{rc:08x}): Windows 10 1709 or later shows it"
                        ));
                    }
                    *slot = counter as isize;
                }
                Ok(q)
            }
        }

        fn read(&self) -> Option<Reading> {
            // SAFETY: the query handle is open.
            if unsafe { PdhCollectQueryData(self.query as _) } != 0 {
                return None;
            }
            Some((items(self.dedicated)?, items(self.shared)?))
        }
    }

    /// Every instance of a counter with its raw value (bytes for these counters).
    fn items(counter: isize) -> Option<Vec<(String, i64)>> {
        // SAFETY: the buffer is sized as PDH asked (bytes), aligned for the items, and the
        // names it points to live inside it.
        unsafe {
            let (mut size, mut count) = (0u32, 0u32);
            let rc =
                PdhGetRawCounterArrayW(counter as _, &mut size, &mut count, std::ptr::null_mut());
            if rc != PDH_MORE_DATA || size == 0 {
                return (rc == 0).then(Vec::new);
            }
            let item = std::mem::size_of::<PDH_RAW_COUNTER_ITEM_W>();
            let mut buf: Vec<PDH_RAW_COUNTER_ITEM_W> =
                Vec::with_capacity((size as usize).div_ceil(item));
            let rc = PdhGetRawCounterArrayW(counter as _, &mut size, &mut count, buf.as_mut_ptr());
            if rc != 0 {
                return None;
            }
            buf.set_len(count as usize);
            Some(
                buf.iter()
                    .map(|it| {
                        let mut n = 0;
                        while *it.szName.add(n) != 0 {
                            n += 1;
                        }
                        let name =
                            String::from_utf16_lossy(std::slice::from_raw_parts(it.szName, n));
                        (name, it.RawValue.FirstValue)
                    })
                    .collect(),
            )
        }
    }

    /// The followed tree's dedicated and shared GPU memory, from the counters.
    pub(crate) struct WddmProbe {
        series: Vec<SeriesDef>,
        poller: Poller<Reading>,
        latest: Option<Reading>,
    }

    impl WddmProbe {
        pub(crate) fn open() -> Result<WddmProbe, Unavailable> {
            let query = Query::open().map_err(|e| Unavailable::new("wddm", e))?;
            let poller = Poller::spawn("wddm", Duration::from_millis(250), true, move || {
                query.read()
            })
            .map_err(|e| Unavailable::new("wddm", format!("cannot start its thread: {e}")))?;
            Ok(WddmProbe {
                series: vec![
                    SeriesDef::bytes(series::WDDM_TREE_DEDICATED),
                    SeriesDef::bytes(series::WDDM_TREE_SHARED),
                ],
                poller,
                latest: None,
            })
        }
    }

    impl Probe for WddmProbe {
        fn name(&self) -> &'static str {
            "wddm"
        }

        fn series(&self) -> &[SeriesDef] {
            &self.series
        }

        fn sample(&mut self, ctx: &Context<'_>, out: &mut [Option<i64>]) {
            if let Some(r) = self.poller.take() {
                self.latest = Some(r);
            }
            let (Some((dedicated, shared)), false) = (&self.latest, ctx.tree.is_empty()) else {
                return;
            };
            out[0] = Some(tree_sum(dedicated, ctx.tree));
            out[1] = Some(tree_sum(shared, ctx.tree));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_name_their_process() {
        assert_eq!(
            instance_pid("pid_11512_luid_0x00000000_0x0000D1A7_phys_0"),
            Some(11512)
        );
        assert_eq!(instance_pid("pid_4"), Some(4));
        assert_eq!(instance_pid("luid_0x0_phys_0"), None);
        assert_eq!(instance_pid("pid_x_luid"), None);
    }

    #[test]
    fn the_tree_sums_its_processes_on_every_adapter() {
        let items = vec![
            ("pid_100_luid_0x0_0xA_phys_0".to_string(), 6 << 30),
            ("pid_100_luid_0x0_0xB_phys_0".to_string(), 1 << 30),
            ("pid_101_luid_0x0_0xA_phys_0".to_string(), 512 << 20),
            ("pid_999_luid_0x0_0xA_phys_0".to_string(), 3 << 30),
        ];
        assert_eq!(tree_sum(&items, &[100, 101]), (7 << 30) + (512 << 20));
        // A tree that holds no GPU memory has no instance: zero, which is known here.
        assert_eq!(tree_sum(&items, &[5]), 0);
    }
}
