//! The prompt watcher replayed from scripted inputs, one test per way a prompt can end.
//! Log lines are real ones (from `fixtures/logs/`). The outcomes decided before any prompt
//! runs (`flag_rejected`, `startup_failed`) come from `classify::classify_startup` and are
//! tested there.

use super::*;
use crate::outcome::Outcome;

const ID: &str = "aed8269e-c4e3-47d5-8c55-4dd3fb0ad8a1";

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(600),
        stall: Duration::from_secs(60),
        ram_floor: None,
    }
}

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// A watch and the actions it asked for, in order.
struct Replay {
    watch: PromptWatch,
    actions: Vec<Action>,
}

impl Replay {
    fn new(limits: Limits) -> Replay {
        Replay {
            watch: PromptWatch::new(ID, limits, Duration::ZERO, true),
            actions: Vec::new(),
        }
    }

    fn feed(&mut self, at: f64, input: Input) -> &mut Self {
        let actions = self.watch.feed(s(at), input);
        self.actions.extend(actions);
        self
    }

    fn ws(&mut self, at: f64, ev: WsEvent) -> &mut Self {
        self.feed(at, Input::Ws(ev))
    }

    fn line(&mut self, at: f64, line: &str) -> &mut Self {
        self.feed(at, Input::Line(line.into()))
    }

    fn tick(&mut self, at: f64) -> &mut Self {
        self.feed(at, Input::Tick { stop: Stop::No })
    }

    /// Ticks every 50 ms from `from` to `to`, as the engine does.
    fn ticks(&mut self, from: f64, to: f64) -> &mut Self {
        let mut t = from;
        while t <= to && !self.watch.is_done() {
            self.tick(t);
            t += 0.05;
        }
        self
    }

    fn node(&mut self, at: f64, node: &str) -> &mut Self {
        self.ws(
            at,
            WsEvent::Executing {
                prompt_id: Some(ID.into()),
                node: Some(node.into()),
            },
        )
    }

    /// `execution_success`, the final `executing`, and ComfyUI's closing log line.
    fn success(&mut self, at: f64) -> &mut Self {
        self.ws(
            at,
            WsEvent::ExecutionSuccess {
                prompt_id: ID.into(),
            },
        )
        .ws(at, executing_none())
        .line(at + 0.01, "Prompt executed in 0.84 seconds")
    }

    fn error(&mut self, at: f64, exception_type: &str, message: &str) -> &mut Self {
        self.ws(
            at,
            WsEvent::ExecutionError {
                prompt_id: ID.into(),
                node_id: Some("3".into()),
                node_type: Some("KSampler".into()),
                exception_type: exception_type.into(),
                exception_message: message.into(),
            },
        )
        .ws(at, executing_none())
    }

    fn done(&mut self) -> Watched {
        assert!(
            self.watch.is_done(),
            "the watch is not over: {:?}",
            self.watch
        );
        let watch = std::mem::replace(
            &mut self.watch,
            PromptWatch::new(ID, limits(), Duration::ZERO, true),
        );
        watch.finish()
    }
}

fn executing_none() -> WsEvent {
    WsEvent::Executing {
        prompt_id: Some(ID.into()),
        node: None,
    }
}

fn sigkill() -> ExitStatus {
    ExitStatus::signal(9)
}

#[test]
fn pass_after_the_final_executing_and_the_log_line() {
    let mut r = Replay::new(limits());
    r.node(0.1, "4").node(0.2, "3");
    r.ws(
        0.3,
        WsEvent::Progress {
            prompt_id: Some(ID.into()),
            node: Some("3".into()),
            value: 1.0,
            max: 20.0,
        },
    );
    r.node(0.4, "3"); // a node seen again is not new
    r.ws(
        0.5,
        WsEvent::ExecutionSuccess {
            prompt_id: ID.into(),
        },
    );
    r.ws(0.5, executing_none());
    assert!(
        !r.watch.is_done(),
        "waits for ComfyUI's own line about the prompt"
    );
    r.line(0.6, "Prompt executed in 0.84 seconds");
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Pass);
    assert_eq!(w.nodes, ["4", "3"]);
    assert!(!w.stop_run);
    assert_eq!(
        r.actions,
        [
            Action::NodeStarted {
                node: "4".into(),
                done: 1
            },
            Action::NodeStarted {
                node: "3".into(),
                done: 2
            },
            Action::Step {
                value: 1.0,
                max: 20.0
            },
            Action::SaveHistory,
        ]
    );
}

#[test]
fn the_log_line_may_come_first_or_never() {
    // Already in the log: done at the final `executing`.
    let mut r = Replay::new(limits());
    r.line(0.4, "Prompt executed in 0.84 seconds")
        .ws(
            0.5,
            WsEvent::ExecutionSuccess {
                prompt_id: ID.into(),
            },
        )
        .ws(0.5, executing_none());
    assert_eq!(r.done().verdict.outcome, Outcome::Pass);
    // Never: done 1.5 s later.
    let mut r = Replay::new(limits());
    r.ws(
        0.5,
        WsEvent::ExecutionSuccess {
            prompt_id: ID.into(),
        },
    )
    .ws(0.5, executing_none())
    .ticks(0.5, 1.9);
    assert!(!r.watch.is_done());
    r.ticks(1.9, 2.1);
    assert_eq!(r.done().verdict.outcome, Outcome::Pass);
}

#[test]
fn an_end_event_without_the_final_executing_ends_after_five_seconds() {
    let mut r = Replay::new(limits());
    r.ws(
        1.0,
        WsEvent::ExecutionSuccess {
            prompt_id: ID.into(),
        },
    )
    .line(1.0, "Prompt executed in 0.84 seconds")
    .ticks(1.0, 5.9);
    assert!(!r.watch.is_done());
    r.ticks(5.9, 6.2);
    assert_eq!(r.done().verdict.outcome, Outcome::Pass);
    assert_eq!(r.actions, [Action::SaveHistory]);
}

#[test]
fn oom() {
    let mut r = Replay::new(limits());
    r.node(0.1, "3")
        .line(0.2, "!!! Exception during processing !!! CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 7.96 GiB of which 33.64 MiB is free.")
        .line(0.2, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 7.96 GiB of which 33.64 MiB is free.")
        .line(0.2, "Got an OOM, unloading all loaded models.")
        .error(0.3, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 1.14 GiB.")
        .line(0.3, "Prompt executed in 0.30 seconds");
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Oom);
    assert!(
        w.verdict.evidence[0].contains("in node 3 (KSampler)"),
        "{:?}",
        w.verdict.evidence
    );
    assert!(!w.stop_run, "ComfyUI lives on: the next prompt may run");
}

#[test]
fn accelerator_oom() {
    let mut r = Replay::new(limits());
    r.line(
        0.2,
        "!!! Exception during processing !!! CUDA error: out of memory",
    )
    .line(0.2, "torch.AcceleratorError: CUDA error: out of memory")
    .error(0.3, "torch.AcceleratorError", "CUDA error: out of memory")
    .line(0.3, "Prompt executed in 11.50 seconds");
    assert_eq!(r.done().verdict.outcome, Outcome::AcceleratorOom);
}

#[test]
fn vbar() {
    let mut r = Replay::new(limits());
    r.line(
        0.2,
        "aimdo: src/model-vbar.c:98:ERROR:Could not reseve Virtual Address space for VBAR",
    )
    .line(
        0.2,
        "!!! Exception during processing !!! VBAR allocation failed",
    )
    .error(0.3, "MemoryError", "VBAR allocation failed")
    .line(0.3, "Prompt executed in 0.84 seconds");
    assert_eq!(r.done().verdict.outcome, Outcome::Vbar);
}

#[test]
fn aimdo_fault_in_a_prompt_that_succeeded() {
    let mut r = Replay::new(limits());
    r.line(
        0.2,
        "aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)",
    )
    .success(0.3);
    assert_eq!(r.done().verdict.outcome, Outcome::AimdoFault);
}

#[test]
fn tensorrt_allocator_in_a_prompt_that_succeeded() {
    let mut r = Replay::new(limits());
    r.line(
        0.2,
        "[09/01/2026-21:14:03] [TRT] [E] [defaultAllocator.cpp::allocate::19] Error Code 1: Cuda Runtime (out of memory)",
    )
    .success(0.3);
    assert_eq!(r.done().verdict.outcome, Outcome::TensorrtAllocator);
}

#[test]
fn node_error() {
    let mut r = Replay::new(limits());
    r.error(0.3, "ValueError", "Expected a 4D tensor")
        .line(0.3, "Prompt executed in 0.30 seconds");
    assert_eq!(r.done().verdict.outcome, Outcome::NodeError);
}

#[test]
fn host_oom_when_the_ram_guard_stops_comfyui() {
    let mut r = Replay::new(Limits {
        ram_floor: Some(512 << 20),
        ..limits()
    });
    r.tick(0.0);
    assert_eq!(r.actions, [Action::CheckRam]);
    r.feed(0.0, Input::RamAvailable(4 << 30)).tick(0.1);
    assert_eq!(r.actions, [Action::CheckRam], "checked every 200 ms");
    r.tick(0.2).feed(0.2, Input::RamAvailable(100 << 20));
    assert_eq!(
        r.actions[2..],
        [
            Action::RamLow {
                available: 100 << 20,
                floor: 512 << 20
            },
            Action::KillGroup
        ]
    );
    r.feed(
        0.3,
        Input::Exited {
            exit: sigkill(),
            ram_exhausted: true,
        },
    );
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::HostOom);
    assert!(w.stop_run);
}

#[test]
fn host_oom_when_the_kernel_kills_comfyui_with_ram_gone() {
    let mut r = Replay::new(limits());
    r.feed(
        2.0,
        Input::Exited {
            exit: sigkill(),
            ram_exhausted: true,
        },
    );
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::HostOom);
    assert_eq!(w.exit, Some(sigkill()));
}

#[test]
fn crash() {
    for exit in [ExitStatus::signal(11), ExitStatus::code(1), sigkill()] {
        let mut r = Replay::new(limits());
        r.node(0.1, "3")
            .line(0.2, "Fatal Python error: Segmentation fault")
            .feed(
                0.3,
                Input::Exited {
                    exit,
                    ram_exhausted: false,
                },
            );
        let w = r.done();
        assert_eq!(w.verdict.outcome, Outcome::Crash, "{exit:?}");
        assert_eq!(w.exit, Some(exit));
        assert!(w.stop_run);
    }
}

#[test]
fn hang_when_nothing_about_the_prompt_moves() {
    let mut r = Replay::new(limits());
    r.node(1.0, "3").line(2.0, "Requested to load SDXL");
    // Another prompt's progress and the server's status frames are no sign of life.
    for t in 3..70 {
        r.ws(
            t as f64,
            WsEvent::Status {
                queue_remaining: Some(1),
            },
        )
        .ws(
            t as f64,
            WsEvent::Progress {
                prompt_id: Some("another".into()),
                node: None,
                value: 1.0,
                max: 2.0,
            },
        )
        .tick(t as f64);
    }
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Hang);
    assert!(w.stop_run);
    assert!(
        w.verdict
            .evidence
            .iter()
            .any(|l| l.contains("Requested to load")),
        "{:?}",
        w.verdict.evidence
    );
}

#[test]
fn time_the_tool_itself_did_not_run_is_not_silence() {
    let mut r = Replay::new(limits());
    r.node(1.0, "3").line(2.0, "Requested to load SDXL");
    // vrambisect was stopped for 100 s (stall timeout 60 s); ComfyUI's lines of that time
    // come just after it runs again.
    r.feed(102.0, Input::Paused(s(100.0))).tick(102.0);
    assert!(!r.watch.is_done(), "a pause of the tool is no hang");
    r.line(
        102.1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB.",
    )
    .error(102.2, "torch.OutOfMemoryError", "CUDA out of memory.")
    .line(102.3, "Prompt executed in 100.30 seconds");
    assert_eq!(r.done().verdict.outcome, Outcome::Oom);

    // Silence after the pause still counts: a hang is found a stall timeout after it.
    let mut r = Replay::new(limits());
    r.node(1.0, "3").feed(102.0, Input::Paused(s(100.0)));
    r.ticks(102.0, 161.0);
    assert!(!r.watch.is_done());
    r.ticks(161.0, 163.0);
    assert_eq!(r.done().verdict.outcome, Outcome::Hang);
}

#[test]
fn a_log_line_is_a_sign_of_life() {
    let mut r = Replay::new(limits());
    for t in 1..100 {
        r.line(t as f64, "  5%|          | 1/20").tick(t as f64);
    }
    assert!(!r.watch.is_done());
}

#[test]
fn timeout_while_the_prompt_still_moves() {
    let mut r = Replay::new(Limits {
        timeout: Duration::from_secs(30),
        ..limits()
    });
    for t in 1..40 {
        r.ws(
            t as f64,
            WsEvent::Progress {
                prompt_id: Some(ID.into()),
                node: Some("3".into()),
                value: t as f64,
                max: 1000.0,
            },
        )
        .tick(t as f64);
    }
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Timeout);
    assert!(w.stop_run);
}

#[test]
fn interrupted_by_a_first_ctrl_c() {
    let mut r = Replay::new(limits());
    r.node(0.1, "3").feed(
        1.0,
        Input::Tick {
            stop: Stop::Graceful,
        },
    );
    assert_eq!(
        r.actions[1..],
        [Action::Interrupting, Action::SendInterrupt]
    );
    // Asked once, however many ticks follow.
    r.feed(
        1.05,
        Input::Tick {
            stop: Stop::Graceful,
        },
    );
    assert_eq!(r.actions.len(), 3);
    r.ws(
        1.2,
        WsEvent::ExecutionInterrupted {
            prompt_id: ID.into(),
            node_id: Some("3".into()),
        },
    )
    .ws(1.2, executing_none())
    .line(1.2, "Prompt executed in 1.20 seconds");
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Interrupted);
    assert!(w.stop_run);
}

#[test]
fn a_first_ctrl_c_that_comfyui_ignores_ends_the_watch_after_ten_seconds() {
    let mut r = Replay::new(limits());
    for t in 0..=220 {
        r.line(t as f64 * 0.05, "still working").feed(
            t as f64 * 0.05,
            Input::Tick {
                stop: Stop::Graceful,
            },
        );
    }
    assert_eq!(r.done().verdict.outcome, Outcome::Interrupted);
}

#[test]
fn a_second_ctrl_c_ends_the_watch_at_once() {
    let mut r = Replay::new(limits());
    r.node(0.1, "3").feed(0.2, Input::Tick { stop: Stop::Now });
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Interrupted);
    assert!(w.stop_run);
}

#[test]
fn interrupted_by_someone_else() {
    let mut r = Replay::new(limits());
    r.ws(
        0.5,
        WsEvent::ExecutionInterrupted {
            prompt_id: ID.into(),
            node_id: Some("3".into()),
        },
    )
    .ws(0.5, executing_none())
    .line(0.5, "Prompt executed in 0.50 seconds");
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Interrupted);
    assert!(!w.stop_run, "not the user's Ctrl-C");
}

#[test]
fn invalid_workflow_when_comfyui_refuses_the_prompt() {
    let w = PromptWatch::refused(vec![
        "Prompt outputs failed validation".into(),
        "CheckpointLoaderSimple 4: Value not in list: ckpt_name".into(),
    ]);
    assert_eq!(w.verdict.outcome, Outcome::InvalidWorkflow);
    assert!(w.stop_run);
}

#[test]
fn without_the_websocket_history_says_how_it_ended() {
    let mut r = Replay {
        watch: PromptWatch::new(ID, limits(), Duration::ZERO, false),
        actions: Vec::new(),
    };
    r.tick(0.0).tick(0.1).tick(0.5);
    assert_eq!(r.actions, [Action::PollHistory, Action::PollHistory]);
    r.feed(0.6, Input::History(PromptEnd::Success))
        .line(0.6, "Prompt executed in 0.6 seconds");
    assert_eq!(r.done().verdict.outcome, Outcome::Pass);
    assert_eq!(r.actions.last(), Some(&Action::SaveHistory));
}

#[test]
fn the_websocket_closing_midway_switches_to_history() {
    let mut r = Replay::new(limits());
    r.tick(0.0);
    assert!(r.actions.is_empty());
    r.feed(0.1, Input::WsClosed).tick(0.15);
    assert_eq!(r.actions, [Action::PollHistory]);
}

#[test]
fn events_of_other_prompts_change_nothing() {
    let mut r = Replay::new(limits());
    r.ws(
        0.1,
        WsEvent::ExecutionSuccess {
            prompt_id: "another".into(),
        },
    )
    .ws(
        0.1,
        WsEvent::Executing {
            prompt_id: Some("another".into()),
            node: None,
        },
    )
    .ws(
        0.1,
        WsEvent::ExecutionError {
            prompt_id: "another".into(),
            node_id: None,
            node_type: None,
            exception_type: "torch.OutOfMemoryError".into(),
            exception_message: "CUDA out of memory".into(),
        },
    )
    .ticks(0.1, 1.0);
    assert!(!r.watch.is_done());
    assert!(r.actions.is_empty());
}

#[test]
fn the_window_keeps_the_last_lines_of_a_long_log() {
    let mut r = Replay::new(limits());
    for i in 0..(WINDOW_LINES + 10) {
        r.line(0.1, &format!("line {i}"));
    }
    assert_eq!(r.watch.window.len(), WINDOW_LINES);
    assert_eq!(r.watch.window.front().unwrap(), "line 10");
    r.feed(
        0.2,
        Input::Exited {
            exit: ExitStatus::code(1),
            ram_exhausted: false,
        },
    );
    let w = r.done();
    assert_eq!(
        w.verdict.evidence.last().unwrap(),
        &format!("line {}", WINDOW_LINES + 9)
    );
}

#[test]
fn comfyui_dying_after_the_prompt_ended_keeps_the_verdict_and_stops_the_run() {
    let mut r = Replay::new(limits());
    r.ws(
        0.5,
        WsEvent::ExecutionSuccess {
            prompt_id: ID.into(),
        },
    )
    .ws(0.5, executing_none());
    assert!(!r.watch.is_done(), "reading the log's last lines");
    r.feed(
        0.6,
        Input::Exited {
            exit: ExitStatus::signal(11),
            ram_exhausted: false,
        },
    );
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Pass);
    assert_eq!(w.exit, Some(ExitStatus::signal(11)));
    assert!(w.stop_run, "no next prompt for a dead server");
}

#[test]
fn a_second_ctrl_c_after_the_end_keeps_the_history() {
    let mut r = Replay::new(limits());
    r.ws(
        0.5,
        WsEvent::ExecutionSuccess {
            prompt_id: ID.into(),
        },
    )
    .feed(0.6, Input::Tick { stop: Stop::Now });
    assert_eq!(r.actions, [Action::SaveHistory]);
    assert_eq!(r.done().verdict.outcome, Outcome::Interrupted);
}

#[test]
fn a_silent_load_that_still_moves_is_no_hang() {
    let mut r = Replay::new(limits());
    r.node(0.0, "4").line(0.1, "Requested to load SDXL");
    // Three minutes without a word, but reading weights from disk all along.
    for t in 1..180 {
        r.feed(
            t as f64,
            Input::Moving("disk reads (40 MiB/s), RAM (+40 MiB)".into()),
        )
        .tick(t as f64);
    }
    assert!(!r.watch.is_done(), "still loading");
    // Then nothing moves any more: a hang, and the evidence says so.
    r.ticks(180.0, 250.0);
    let w = r.done();
    assert_eq!(w.verdict.outcome, Outcome::Hang);
    let last = w.verdict.evidence.last().unwrap();
    assert!(last.starts_with("nothing moved for 1m00s"), "{last}");
    assert!(
        last.contains("the last sign of life was disk reads (40 MiB/s)"),
        "{last}"
    );
}
