//! The outcome of one ComfyUI run: the contract's outcome kinds.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What happened to a run (JSON `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The workflow ran to `execution_success` with no allocator errors in its log.
    Pass,
    /// CUDA out of memory (`torch.OutOfMemoryError`, native or cudaMallocAsync wording).
    Oom,
    /// `torch.AcceleratorError: CUDA error: out of memory` (not caught by ComfyUI before v0.38).
    AcceleratorOom,
    /// Host RAM exhausted (`DefaultCPUAllocator`, `HostBuffer` failures, or RAM ran out).
    HostOom,
    /// `MemoryError: VBAR allocation failed` (Dynamic VRAM could not reserve address space).
    Vbar,
    /// comfy-aimdo errors that are not an OOM (`VRAM Allocation failed (non OOM)`, `Fault failed`).
    AimdoFault,
    /// TensorRT's allocator failed (`defaultAllocator.cpp … Error Code 1: Cuda Runtime`),
    /// even if the prompt "succeeded".
    TensorrtAllocator,
    /// No websocket or log activity for longer than the stall timeout.
    Hang,
    /// ComfyUI died during the run (abort, segfault, killed by a signal).
    Crash,
    /// The run took longer than the wall-clock timeout.
    Timeout,
    /// ComfyUI's argparse refused the flags (exit 2).
    FlagRejected,
    /// ComfyUI exited before it was ready, for a reason other than its flags.
    StartupFailed,
    /// ComfyUI refused the workflow (HTTP 400) or it is not an API-format workflow.
    InvalidWorkflow,
    /// The prompt was interrupted (by the user, or `/interrupt`).
    Interrupted,
    /// A node failed with an error unrelated to memory (extension of the contract's list).
    NodeError,
}

impl Outcome {
    /// Every kind, in the contract's order.
    pub const ALL: [Outcome; 15] = [
        Outcome::Pass,
        Outcome::Oom,
        Outcome::AcceleratorOom,
        Outcome::HostOom,
        Outcome::Vbar,
        Outcome::AimdoFault,
        Outcome::TensorrtAllocator,
        Outcome::Hang,
        Outcome::Crash,
        Outcome::Timeout,
        Outcome::FlagRejected,
        Outcome::StartupFailed,
        Outcome::InvalidWorkflow,
        Outcome::Interrupted,
        Outcome::NodeError,
    ];

    /// The JSON name (`accelerator_oom`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Oom => "oom",
            Outcome::AcceleratorOom => "accelerator_oom",
            Outcome::HostOom => "host_oom",
            Outcome::Vbar => "vbar",
            Outcome::AimdoFault => "aimdo_fault",
            Outcome::TensorrtAllocator => "tensorrt_allocator",
            Outcome::Hang => "hang",
            Outcome::Crash => "crash",
            Outcome::Timeout => "timeout",
            Outcome::FlagRejected => "flag_rejected",
            Outcome::StartupFailed => "startup_failed",
            Outcome::InvalidWorkflow => "invalid_workflow",
            Outcome::Interrupted => "interrupted",
            Outcome::NodeError => "node_error",
        }
    }

    /// A few words for people ("CUDA out of memory").
    pub fn describe(self) -> &'static str {
        match self {
            Outcome::Pass => "passed",
            Outcome::Oom => "CUDA out of memory",
            Outcome::AcceleratorOom => "CUDA error: out of memory (AcceleratorError)",
            Outcome::HostOom => "out of system RAM",
            Outcome::Vbar => "VBAR allocation failed (Dynamic VRAM)",
            Outcome::AimdoFault => "comfy-aimdo fault (Dynamic VRAM)",
            Outcome::TensorrtAllocator => "TensorRT allocator error",
            Outcome::Hang => "hang",
            Outcome::Crash => "crash",
            Outcome::Timeout => "timeout",
            Outcome::FlagRejected => "flags rejected by ComfyUI",
            Outcome::StartupFailed => "ComfyUI failed to start",
            Outcome::InvalidWorkflow => "invalid workflow",
            Outcome::Interrupted => "interrupted",
            Outcome::NodeError => "node error (not memory)",
        }
    }

    /// The headline of a failed prompt for the extension's panel ("Out of system RAM").
    pub(crate) fn title(self) -> &'static str {
        match self {
            Outcome::Pass => "The log shows no failure",
            Outcome::Oom => "Out of GPU memory (PyTorch's allocator)",
            Outcome::AcceleratorOom => {
                "Out of GPU memory (a CUDA allocation outside PyTorch's allocator)"
            }
            Outcome::HostOom => "Out of system RAM",
            Outcome::Vbar => "Dynamic VRAM could not reserve GPU address space (VBAR)",
            Outcome::AimdoFault => "A CUDA error of Dynamic VRAM's allocator (comfy-aimdo)",
            Outcome::TensorrtAllocator => "TensorRT's own CUDA allocator failed",
            Outcome::Hang => "The prompt stopped making progress (hang)",
            Outcome::Crash => "ComfyUI crashed",
            Outcome::Timeout => "The prompt ran out of time",
            Outcome::FlagRejected => "ComfyUI refused a launch flag",
            Outcome::StartupFailed => "ComfyUI did not start",
            Outcome::InvalidWorkflow => "The workflow was refused",
            Outcome::Interrupted => "The prompt was interrupted",
            Outcome::NodeError => "A node failed (not a memory error)",
        }
    }

    /// Whether launch flags may fix a failure of this kind, so that the extension offers to
    /// diagnose it: a memory failure, or a hang, crash or timeout (which memory pressure
    /// causes often enough); not a node's own error or an interrupt.
    pub(crate) fn flags_may_fix(self) -> bool {
        self.is_memory() || matches!(self, Outcome::Hang | Outcome::Crash | Outcome::Timeout)
    }

    /// Whether the workflow was tested and failed (`run` exits 1).
    pub fn is_failure(self) -> bool {
        !matches!(self, Outcome::Pass) && !self.is_untestable()
    }

    /// Whether the workflow could not be tested at all (`run` exits 125). A flag this
    /// ComfyUI rejects is one: in `git bisect run` across versions, a version older than the
    /// flag must be skipped, not called bad.
    pub fn is_untestable(self) -> bool {
        matches!(
            self,
            Outcome::FlagRejected
                | Outcome::StartupFailed
                | Outcome::InvalidWorkflow
                | Outcome::Interrupted
        )
    }

    /// Whether ComfyUI is still running after a prompt with this outcome (it caught the
    /// error, or nothing went wrong), so its memory after the prompt means something.
    pub fn server_survives(self) -> bool {
        matches!(
            self,
            Outcome::Pass
                | Outcome::Oom
                | Outcome::AcceleratorOom
                | Outcome::Vbar
                | Outcome::AimdoFault
                | Outcome::TensorrtAllocator
                | Outcome::NodeError
                | Outcome::InvalidWorkflow
        )
    }

    /// A memory failure of the kind vrambisect exists for.
    pub fn is_memory(self) -> bool {
        matches!(
            self,
            Outcome::Oom
                | Outcome::AcceleratorOom
                | Outcome::HostOom
                | Outcome::Vbar
                | Outcome::AimdoFault
                | Outcome::TensorrtAllocator
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_match_the_contract() {
        for o in Outcome::ALL {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            let back: Outcome = serde_json::from_str(&json).unwrap();
            assert_eq!(back, o);
        }
    }

    #[test]
    fn exit_classes() {
        assert!(!Outcome::Pass.is_failure());
        assert!(Outcome::Oom.is_failure());
        assert!(
            Outcome::FlagRejected.is_untestable() && !Outcome::FlagRejected.is_failure(),
            "a version without the flag is skipped by git bisect run, not called bad"
        );
        assert!(Outcome::StartupFailed.is_untestable());
        assert!(Outcome::InvalidWorkflow.is_untestable());
        assert!(!Outcome::Hang.is_memory());
    }
}
