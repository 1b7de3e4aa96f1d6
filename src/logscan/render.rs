//! `logscan` for people: the answer first, then the startup facts, the prompts and the known
//! issues with the command that tests each.

use super::report::LogReport;
use super::state::{PromptSummary, StartSummary};
use crate::outcome::Outcome;
use crate::output::{Answer, Style};
use std::io::{self, Write};

/// Prompts listed in full before the list is cut to the failures and the last few.
const LIST_ALL: usize = 15;
const LIST_LAST: usize = 3;

fn outcome_text(o: Option<Outcome>, style: &Style) -> String {
    match o {
        Some(Outcome::Pass) => style.good("pass"),
        Some(o @ (Outcome::Interrupted | Outcome::InvalidWorkflow)) => style.warn(o.as_str()),
        Some(o) => style.bad(o.as_str()),
        None => style.warn("unknown"),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

impl Answer for LogReport {
    /// Writes the report.
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        let name = if self.file == "-" {
            "standard input"
        } else {
            &self.file
        };
        writeln!(
            out,
            "{} {}",
            style.bold(name),
            style.dim(&format!(
                "({}, {}, {})",
                plural(self.lines, "line", "lines"),
                plural(self.starts_total, "server start", "server starts"),
                plural(self.prompts_total, "prompt", "prompts")
            ))
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{} {}  {}",
            style.bold("Outcome"),
            outcome_text(self.outcome, style),
            self.summary
        )?;
        if let Some(c) = &self.comparison {
            writeln!(out)?;
            writeln!(out, "{} {}", style.bold("Compare"), c.statement)?;
            if let Some(cmd) = &c.bisect.command {
                writeln!(out, "        confirm: {}", style.bold(cmd))?;
            }
        }
        startup(self, style, out)?;
        starts(self, style, out)?;
        prompts(self, style, out)?;
        issues(self, style, out)?;
        Ok(())
    }
}

fn row(out: &mut dyn Write, style: &Style, label: &str, value: String) -> io::Result<()> {
    writeln!(out, "  {}  {value}", style.dim(&format!("{label:<13}")))
}

fn startup(r: &LogReport, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let f = &r.startup.facts;
    writeln!(out)?;
    match r.startup.line {
        Some(line) if r.starts_total > 1 => writeln!(
            out,
            "{} {}",
            style.bold("Startup"),
            style.dim(&format!(
                "(line {line}, the last of {} starts)",
                r.starts_total
            ))
        )?,
        Some(line) => writeln!(
            out,
            "{} {}",
            style.bold("Startup"),
            style.dim(&format!("(line {line})"))
        )?,
        None => {
            writeln!(
                out,
                "{} {}",
                style.bold("Startup"),
                style.dim("(not in the log: it begins after ComfyUI started)")
            )?;
            return Ok(());
        }
    }
    // A start that never came up says little: show what it said, not a list of blanks.
    let came_up = f.ready;
    let unknown = || "not in the log".to_string();
    let mut comfy = f.comfyui_version.clone().unwrap_or_else(unknown);
    let extra: Vec<String> = [
        f.comfy_aimdo_version
            .as_ref()
            .map(|v| format!("comfy-aimdo {v}")),
        f.comfy_kitchen_version
            .as_ref()
            .map(|v| format!("comfy-kitchen {v}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !extra.is_empty() {
        comfy.push_str(&format!("  ({})", extra.join(", ")));
    }
    if came_up || f.comfyui_version.is_some() {
        row(out, style, "ComfyUI", comfy)?;
    }
    if let Some(t) = &f.pytorch_version {
        let py = f
            .python_version
            .as_ref()
            .map(|p| format!("  (Python {})", p.split_whitespace().next().unwrap_or(p)))
            .unwrap_or_default();
        row(out, style, "PyTorch", format!("{t}{py}"))?;
    }
    if let Some(d) = &f.device {
        let mut v = d.clone();
        if let (Some(vram), Some(ram)) = (f.total_vram_mb, f.total_ram_mb) {
            v.push_str(&format!(" — {vram} MiB VRAM, {ram} MiB RAM"));
        }
        row(out, style, "Device", v)?;
    }
    if let Some(a) = &f.allocator {
        row(out, style, "Allocator", a.clone())?;
    }
    if came_up || f.vram_state.is_some() {
        row(
            out,
            style,
            "VRAM state",
            f.vram_state.clone().unwrap_or_else(unknown),
        )?;
    }
    let dynamic = match (f.dynamic_vram, &f.dynamic_vram_note) {
        (Some(true), _) => Some(style.good("on")),
        (Some(false), Some(note)) => Some(format!("off ({note})")),
        (Some(false), None) => Some("off".to_string()),
        (None, _) if came_up => Some("unknown".to_string()),
        (None, _) => None,
    };
    if let Some(d) = dynamic {
        row(out, style, "Dynamic VRAM", d)?;
    }
    let pinned = match (f.pinned_memory, f.pinned_memory_mb) {
        (Some(true), Some(mb)) => Some(format!("on ({mb:.0} MiB)")),
        (Some(true), None) => Some("on".into()),
        (Some(false), _) => Some("off".into()),
        (None, _) => None,
    };
    if let Some(p) = pinned {
        row(out, style, "Pinned memory", p)?;
    }
    match f.async_offload_streams {
        Some(0) => row(out, style, "Async offload", "off".to_string())?,
        Some(n) => row(out, style, "Async offload", format!("{n} streams"))?,
        None => {}
    }
    if let Some(c) = &f.cache {
        row(out, style, "Cache", c.replace('_', " "))?;
    }
    let launch = match &r.startup.launch_args {
        Some(a) if a.is_empty() => "none".to_string(),
        Some(a) => crate::text::command_line(a),
        None => "not shown in the log".to_string(),
    };
    row(out, style, "Launch flags", launch)?;
    if let Some(dir) = &r.startup.comfyui_dir {
        row(out, style, "ComfyUI path", dir.clone())?;
    }
    Ok(())
}

fn starts(r: &LogReport, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let interesting = r.starts_total > 1 || r.starts.iter().any(|s| s.outcome.is_some());
    if !interesting {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "{}", style.bold("Server starts"))?;
    if r.starts_total > r.starts.len() as u64 {
        writeln!(
            out,
            "  {}",
            style.dim(&format!(
                "… {} earlier starts not shown",
                thousands(r.starts_total - r.starts.len() as u64)
            ))
        )?;
    }
    for s in &r.starts {
        start_line(s, style, out)?;
    }
    Ok(())
}

fn start_line(s: &StartSummary, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let status = match (s.up, s.outcome) {
        (_, Some(o)) => style.bad(o.as_str()),
        (true, None) => style.good("up"),
        (false, None) => style.warn("incomplete"),
    };
    let version = s
        .facts
        .comfyui_version
        .as_ref()
        .map(|v| format!("ComfyUI {v}, "))
        .unwrap_or_default();
    writeln!(
        out,
        "  #{:<3} line {:<8} {status}  {}",
        s.index,
        s.line,
        style.dim(&format!(
            "{version}{}",
            plural(s.prompts as u64, "prompt", "prompts")
        ))
    )?;
    if s.outcome.is_some() || !s.up {
        if let Some(e) = &s.explanation {
            writeln!(out, "        {}", style.dim(e))?;
        }
        for e in &s.evidence {
            writeln!(out, "        {e}")?;
        }
    }
    Ok(())
}

fn prompts(r: &LogReport, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    if r.prompts.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "{}", style.bold("Prompts"))?;
    let shown: Vec<&PromptSummary> = if r.prompts.len() <= LIST_ALL {
        r.prompts.iter().collect()
    } else {
        let last_from = r.prompts.len() - LIST_LAST;
        let mut v: Vec<&PromptSummary> = r
            .prompts
            .iter()
            .enumerate()
            .filter(|(i, p)| *i >= last_from || p.outcome != Some(Outcome::Pass))
            .map(|(_, p)| p)
            .collect();
        if v.len() > LIST_ALL + LIST_LAST {
            let tail = v.split_off(v.len() - LIST_LAST);
            v.truncate(LIST_ALL);
            v.extend(tail);
        }
        v
    };
    let mut previous = 0;
    for p in &shown {
        if p.index > previous + 1 && previous > 0 {
            writeln!(
                out,
                "  {}",
                style.dim(&format!(
                    "… {} not shown",
                    plural(p.index - previous - 1, "prompt", "prompts")
                ))
            )?;
        }
        previous = p.index;
        prompt_line(p, style, out)?;
    }
    let counts: Vec<String> = r
        .prompt_counts
        .iter()
        .map(|(k, n)| format!("{k} {}", thousands(*n)))
        .collect();
    if shown.len() as u64 != r.prompts_total {
        writeln!(
            out,
            "  {}",
            style.dim(&format!("all prompts: {}", counts.join(", ")))
        )?;
    }
    Ok(())
}

fn prompt_line(p: &PromptSummary, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let mut detail = Vec::new();
    match p.outcome {
        Some(Outcome::Pass) | None => {}
        Some(o) => detail.push(o.describe().to_string()),
    }
    if !p.models.is_empty() {
        detail.push(p.models.join(", "));
    }
    if let Some(t) = &p.executed_in {
        detail.push(t.clone());
    }
    if p.started_before_log {
        detail.push("began before the log".into());
    }
    let label = format!("{:<18}", p.outcome.map_or("unknown", Outcome::as_str));
    let label = match p.outcome {
        Some(Outcome::Pass) => style.good(&label),
        Some(Outcome::Interrupted) | Some(Outcome::InvalidWorkflow) | None => style.warn(&label),
        Some(_) => style.bad(&label),
    };
    writeln!(
        out,
        "  #{:<4} line {:<8} {label} {}",
        p.index,
        p.line,
        style.dim(&detail.join("; "))
    )?;
    if p.outcome != Some(Outcome::Pass) {
        if let Some(e) = &p.explanation {
            writeln!(out, "        {}", style.dim(e))?;
        }
        for e in &p.evidence {
            writeln!(out, "        {e}")?;
        }
    }
    Ok(())
}

fn issues(r: &LogReport, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    if r.known_issues.is_empty() {
        writeln!(
            out,
            "{} {}",
            style.bold("Known issues"),
            style.dim("none of the catalogue's failure signatures is in this log")
        )?;
        return Ok(());
    }
    writeln!(out, "{}", style.bold("Known issues"))?;
    let mut shown: Vec<&[String]> = Vec::new();
    for k in &r.known_issues {
        let where_ = if k.prompts > 0 {
            format!(
                "{} in {}, first at line {}",
                plural(k.lines, "line", "lines"),
                plural(k.prompts, "prompt", "prompts"),
                k.first_line
            )
        } else {
            format!(
                "{}, first at line {}",
                plural(k.lines, "line", "lines"),
                k.first_line
            )
        };
        writeln!(
            out,
            "  {}  {}  {}",
            style.bad(k.id),
            k.title,
            style.dim(&format!("({where_})"))
        )?;
        writeln!(out, "      {}", k.meaning)?;
        writeln!(out, "      {}", style.dim(&format!("e.g. {}", k.example)))?;
        if !k.issues.is_empty() {
            let nums: Vec<String> = k.issues.iter().map(|n| format!("#{n}")).collect();
            writeln!(out, "      upstream: {}", nums.join(" "))?;
        }
        // An issue whose toggles an earlier command already tries needs no command of its own
        // (ComfyUI's OOM handler line comes with every CUDA OOM).
        let covered = !k.bisect.toggles.is_empty()
            && shown
                .iter()
                .any(|t| k.bisect.toggles.iter().all(|x| t.contains(x)));
        if covered {
            writeln!(
                out,
                "      {}",
                style.dim("test it: the command above covers it")
            )?;
            continue;
        }
        if k.bisect.command.is_some() {
            shown.push(&k.bisect.toggles);
        }
        match &k.bisect.command {
            Some(cmd) => {
                writeln!(out, "      test it: {}", style.bold(cmd))?;
                for n in &k.bisect.notes {
                    writeln!(out, "               {}", style.dim(n))?;
                }
            }
            None => {
                for n in &k.bisect.notes {
                    writeln!(out, "      {}", style.dim(n))?;
                }
            }
        }
        for s in &k.bisect.skipped {
            writeln!(
                out,
                "      {}",
                style.dim(&format!("not toggled: {} — {}", s.flag, s.reason))
            )?;
        }
    }
    Ok(())
}
