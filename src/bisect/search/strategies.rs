//! The strategies: the adaptive search (what is tried first, the hypotheses' next run, splitting
//! and minimising the changes that fix it, the least value of a numeric flag), each change on its
//! own, and the whole matrix.

use super::*;

impl Search<'_> {
    /// The changes that fix it (see [`hypotheses`]); then the least value of each
    /// multi-valued flag.
    pub(super) fn adaptive(&mut self) -> Result<Option<Choice>, Stopped> {
        let found = if self.space.dims.len() <= hypotheses::MAX_DIMS {
            self.hypothesis_search()?
        } else {
            self.split_search()?
        };
        let Some(dims) = found else { return Ok(None) };
        self.least_values(self.space.strong(&dims)).map(Some)
    }

    /// For flags with several values, the least that still fixes it (values are ordered, so
    /// they are bisected).
    pub(super) fn least_values(&mut self, mut choice: Choice) -> Result<Choice, Stopped> {
        for i in 0..choice.len() {
            let (d, strongest) = choice[i];
            if strongest == 0 {
                continue;
            }
            // A searched value: from where the evidence points (see `least_value`).
            if self
                .space
                .value_searches
                .iter()
                .any(|v| v.flag == self.space.dims[d].flag())
            {
                choice[i] = (d, self.least_value(&choice, i)?);
                continue;
            }
            let (mut lo, mut hi) = (0usize, strongest);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let mut trial = choice.clone();
                trial[i] = (d, mid);
                if self.evaluate(&trial)? == Eval::Pass {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            choice[i] = (d, hi);
        }
        Ok(choice)
    }

    /// The configuration of a set of dimensions (bit d: dimension d at its strongest).
    pub(super) fn mask_config(&self, mask: u32) -> Option<Config> {
        self.space.config(&self.space.strong(&bits(mask)))
    }

    /// What the finished configurations say, as masks: passed (enough times) or failed;
    /// and those that could not start here (`dead`), which say nothing about the question.
    /// Configurations still short of the passes they need say nothing yet.
    pub(super) fn known_masks(&self, asked: &[u32]) -> (Vec<(u32, bool)>, Vec<u32>) {
        let target = self.target.expect("baseline ran first");
        let needed = self.passes_needed();
        // Some(Some(passed)); Some(None): cannot run here; None: not enough runs yet.
        let status = |t: &Tally| {
            let failed_start = t.count(Outcome::StartupFailed);
            let refused = t.count(Outcome::FlagRejected) + t.count(Outcome::InvalidWorkflow);
            if t.count(target) > 0 || t.other_failures(target) >= OTHERS_TO_GIVE_UP {
                Some(Some(false))
            } else if t.passes() >= needed {
                Some(Some(true))
            } else if refused > 0 || failed_start >= STARTS_TO_GIVE_UP {
                Some(None)
            } else {
                None
            }
        };
        let mut known: Vec<(u32, bool)> = Vec::new();
        let mut dead: Vec<u32> = Vec::new();
        let mut add = |mask: u32, st: Option<Option<bool>>| match st {
            Some(Some(passed)) if !known.iter().any(|(m, _)| *m == mask) => {
                known.push((mask, passed))
            }
            Some(None) if !dead.contains(&mask) => dead.push(mask),
            _ => {}
        };
        let evidence = self.evidence();
        for t in &evidence {
            let strong = t
                .config
                .choice
                .iter()
                .all(|(d, a)| *a + 1 == self.space.dims[*d].alternatives());
            if strong {
                add(
                    t.config.choice.iter().fold(0, |m, (d, _)| m | 1 << d),
                    status(t),
                );
            }
        }
        // A mask may share its run with another (ComfyUI parses both the same way).
        for q in asked {
            if let Some(c) = self.mask_config(*q) {
                add(
                    *q,
                    evidence
                        .iter()
                        .find(|t| t.config.key == c.key)
                        .and_then(status),
                );
            }
        }
        (known, dead)
    }

    /// Runs the configurations [`hypotheses::next`] chooses until one answer of up to three
    /// changes is left, then falls back to delta debugging when none fits.
    pub(super) fn hypothesis_search(&mut self) -> Result<Option<Vec<usize>>, Stopped> {
        let k = self.space.dims.len();
        let valid = |m: u32| self.mask_config(m).is_some();
        let mut answers = hypotheses::answers(k, &valid);
        if !self.likely_first(&answers)?
            && let Some(keep) = self.keep_first()?
        {
            answers.retain(|a| a & !keep == 0);
        }
        let mut asked: Vec<u32> = Vec::new();
        let mut rechecked = false;
        let mut everything_tried = false;
        loop {
            // Failures turned out flaky: the flaky search takes over from the runs so far.
            if self.flaky {
                return Ok(None);
            }
            let (known, dead) = self.known_masks(&asked);
            // No single change left: before pairs and triples are split, one run of every
            // change says whether any fix is left at all (if it fails, none is).
            if !everything_tried && hypotheses::singles_left(&answers, &known) == 0 {
                everything_tried = true;
                let gone = hypotheses::cannot_start(&known, &dead);
                let open = answers.iter().fold(0, |m, a| m | a) & !gone;
                let all = self.largest_valid(&bits(open));
                let mask = all.iter().fold(0, |m, d| m | 1 << d);
                if mask != 0 && !known.iter().any(|(q, _)| *q == mask) {
                    // In full at once where a shortened failure would be run again in full
                    // (NO FIX FOUND is confirmed so) and is not that run already.
                    if self.next_kind() == RunKind::Quick
                        && !self.flaky
                        && !self.failure_before_sampling()
                    {
                        self.prefer = Some(RunKind::Full);
                    }
                    let evaluated = self.evaluate(&self.space.strong(&all));
                    self.prefer = None;
                    evaluated?;
                    asked.push(mask);
                    continue;
                }
            }
            let valid = |m: u32| self.mask_config(m).is_some();
            let next = hypotheses::next(k, &answers, &known, &dead, &valid);
            match next {
                hypotheses::Next::Run(q) => {
                    let before = self.runs;
                    self.prefer = self.final_run_kind(q, &answers, &known);
                    let evaluated = self.evaluate(&self.space.strong(&bits(q)));
                    self.prefer = None;
                    evaluated?;
                    if self.runs == before && asked.contains(&q) {
                        // Nothing new came of it: stop choosing.
                        break;
                    }
                    asked.push(q);
                }
                hypotheses::Next::Accept(a) => return Ok(Some(bits(a))),
                hypotheses::Next::NoneLeft => {}
            }
            // When no single change is left, a pass on the way may have been luck: run
            // what passed once more, newest first, before looking for changes that act
            // together.
            let (now, _) = self.known_masks(&asked);
            let none_single = hypotheses::singles_left(&answers, &now) == 0;
            if (none_single || next == hypotheses::Next::NoneLeft) && !rechecked && !self.flaky {
                rechecked = true;
                let passed: Vec<u32> = now.iter().filter(|(_, p)| *p).map(|(m, _)| *m).collect();
                for m in passed.iter().rev() {
                    let config = self.mask_config(*m).expect("ran before");
                    self.run_once(&config)?;
                    if self.flaky {
                        break;
                    }
                }
                continue;
            }
            if next == hypotheses::Next::NoneLeft {
                break;
            }
        }
        // Changes that cannot start here would make "everything" fail for nothing.
        let (known, dead) = self.known_masks(&asked);
        let gone = hypotheses::cannot_start(&known, &dead);
        let all: Vec<usize> = (0..k).filter(|d| gone & (1 << d) == 0).collect();
        self.together(&all)
    }

    /// Likely answers first: of the toggles the baseline's failure names as its usual fixes
    /// (the known failure its failing run matched, [`crate::classify::catalogue`]), the first
    /// that is still a possible answer runs alone before anything else (where a cheaper fix
    /// is looked for and Dynamic VRAM is on, the first that keeps it on). Whether it passed:
    /// a pass is then the answer the search confirms, a failure rules out that change alone.
    pub(super) fn likely_first(&mut self, answers: &[u32]) -> Result<bool, Stopped> {
        let Some(mut prior) = self.prior() else {
            return Ok(false);
        };
        let keep_wanted = !self.settings.first_fix
            && self.space.keeps_dynamic_vram(&self.space.baseline()) == Some(true);
        // Taking away the user's own flags that keep more in memory, first; then adding the
        // usual fixes (taking away a flag of the user's is not what fixed it upstream).
        let own = |d: usize| {
            matches!(self.space.dims[d], crate::bisect::space::Dim::Remove { .. })
                && prior
                    .own_flags
                    .iter()
                    .any(|f| f == self.space.dims[d].flag())
        };
        let dims: Vec<usize> = (0..self.space.dims.len())
            .filter(|d| {
                own(*d)
                    || matches!(self.space.dims[*d], crate::bisect::space::Dim::Add { .. })
                        && prior.flags.iter().any(|f| f == self.space.dims[*d].flag())
            })
            .collect();
        let rank = |d: &usize| {
            let flag = self.space.dims[*d].flag();
            match own(*d) {
                true => (0, prior.own_flags.iter().position(|f| f == flag)),
                false => (1, prior.flags.iter().position(|f| f == flag)),
            }
        };
        let mut ordered = dims.clone();
        ordered.sort_by_key(rank);
        // (Chosen from the answers alone, not from what has run: a resumed session picks the
        // same, and finds its run on record.)
        let pick = ordered.into_iter().find(|d| {
            let strong = self.space.strong(&[*d]);
            answers.contains(&(1 << d))
                && (!keep_wanted
                    || self
                        .space
                        .config(&strong)
                        .and_then(|c| self.space.keeps_dynamic_vram(&c))
                        == Some(true))
        });
        prior.flags.retain(|f| {
            dims.iter()
                .any(|d| !own(*d) && self.space.dims[*d].flag() == f)
        });
        prior.tried_first = pick.map(|d| {
            self.describe_config(&self.space.config(&self.space.strong(&[d])).expect("valid"))
        });
        if pick.is_none() && (!prior.flags.is_empty() || !prior.own_flags.is_empty()) {
            prior.not_tried = Some(if keep_wanted {
                "none of them keeps Dynamic VRAM on, which is looked for first".into()
            } else {
                "none of them can run alone here".into()
            });
        }
        self.prior_done = Some(prior);
        let Some(d) = pick else {
            return Ok(false);
        };
        // Full at once where a pass of it shortened would cost more than it saves (a failure
        // before sampling costs the same either way).
        let (known, _) = self.known_masks(&[]);
        self.prefer = self.final_run_kind(1 << d, answers, &known);
        let evaluated = self.evaluate(&self.space.strong(&[d]));
        self.prefer = None;
        Ok(evaluated? == Eval::Pass)
    }

    /// The usual fixes of the known failures the baseline's failing full run matched (its
    /// shortened run, where a failure on record stands in for the full one); first, where the
    /// sampler saw other processes hold a gigabyte or more of VRAM as it failed, the room
    /// ComfyUI leaves them (`--vram-headroom`; `--reserve-vram` before Dynamic VRAM).
    pub(super) fn prior(&self) -> Option<Prior> {
        let target = self.target?;
        let base = self.space.baseline().key;
        let others = |r: &Trial| r.cost.others_vram_bytes.filter(|b| *b >= OTHERS_VRAM_PRIOR);
        // The user's own flags that keep more of what ran out in memory, where the search
        // may take them away.
        let own_flags: Vec<String> = self
            .space
            .dims
            .iter()
            .filter(|d| matches!(d, crate::bisect::space::Dim::Remove { .. }))
            .map(|d| d.flag().to_string())
            .filter(|f| {
                OWN_FLAGS
                    .iter()
                    .any(|(own, kinds)| own == f && kinds.contains(&target))
            })
            .collect();
        // The first failing run of the user's flags that says something (a known failure,
        // other processes' VRAM); else, where their own flags point, the first that failed.
        // (A shortened one where the failure on record stands in for the full run.)
        let failing = || {
            self.tallies
                .iter()
                .filter(|t| t.config.key == base)
                .flat_map(|t| &t.trials)
                .filter(|r| {
                    (r.kind == RunKind::Full || self.recorded_stands_in()) && r.outcome == target
                })
        };
        let failed = failing()
            .find(|r| !r.signatures.is_empty() || others(r).is_some())
            .or_else(|| failing().find(|_| !own_flags.is_empty()))?;
        let mut flags: Vec<String> = Vec::new();
        let others_vram_bytes = others(failed);
        if others_vram_bytes.is_some() {
            flags.extend(["--vram-headroom".to_string(), "--reserve-vram".to_string()]);
        }
        for id in &failed.signatures {
            let Some(sig) = crate::classify::catalogue::by_id(id) else {
                continue;
            };
            for f in sig.flags_to_try {
                let name = f.split('=').next().unwrap_or(f).to_string();
                if !flags.contains(&name) {
                    flags.push(name);
                }
            }
        }
        (!flags.is_empty() || !own_flags.is_empty()).then(|| Prior {
            run: failed.n,
            signatures: failed.signatures.clone(),
            flags,
            tried_first: None,
            not_tried: None,
            others_vram_bytes,
            own_flags,
        })
    }

    /// Where the search goes on to a cheaper fix and Dynamic VRAM is on, the changes that keep
    /// it on are tried together first. If they pass, the answer is looked for among them
    /// alone (the mask returned): one that turns Dynamic VRAM off could not be recommended
    /// over them, so it need not run. If they fail, none of them fixes it alone (the answer is
    /// taken to be monotone) and the search goes on over every change, that run one of its
    /// answers.
    pub(super) fn keep_first(&mut self) -> Result<Option<u32>, Stopped> {
        if self.settings.first_fix || self.flaky || self.settings.repeat > 1 {
            return Ok(None);
        }
        if self.space.keeps_dynamic_vram(&self.space.baseline()) != Some(true) {
            return Ok(None);
        }
        let (mut keep, mut off) = (Vec::new(), false);
        for d in 0..self.space.dims.len() {
            let config = self.space.config(&self.space.strong(&[d]));
            match config.and_then(|c| self.space.keeps_dynamic_vram(&c)) {
                Some(true) => keep.push(d),
                Some(false) => off = true,
                None => {}
            }
        }
        if keep.is_empty() || !off {
            return Ok(None);
        }
        let together = self.largest_valid(&keep);
        Ok(
            (self.evaluate(&self.space.strong(&together))? == Eval::Pass)
                .then(|| together.iter().fold(0, |m, d| m | 1 << d)),
        )
    }

    /// Group testing for one change that fixes it, then [`Self::together`]: the search for
    /// spaces too large to enumerate.
    pub(super) fn split_search(&mut self) -> Result<Option<Vec<usize>>, Stopped> {
        let all: Vec<usize> = (0..self.space.dims.len()).collect();
        for _attempt in 0..3 {
            let flaky_before = self.flaky;
            let mut candidates = all.clone();
            let mut passed_sets: Vec<Vec<usize>> = Vec::new();
            while candidates.len() > 1 {
                let half: Vec<usize> = candidates[..candidates.len().div_ceil(2)].to_vec();
                match self.evaluate(&self.space.strong(&half))? {
                    Eval::Pass => {
                        passed_sets.push(half.clone());
                        candidates = half;
                    }
                    Eval::Fail | Eval::Invalid => candidates = candidates[half.len()..].to_vec(),
                }
            }
            if self.evaluate(&self.space.strong(&candidates))? == Eval::Pass {
                return Ok(Some(candidates));
            }
            // The search led to a configuration that fails. Either changes must act together,
            // or a pass on the way was luck: look again at what passed.
            if !self.flaky {
                for set in passed_sets.iter().rev() {
                    let config = self
                        .space
                        .config(&self.space.strong(set))
                        .expect("ran before");
                    self.run_once(&config)?;
                    if self.flaky {
                        break;
                    }
                }
            }
            if self.flaky && !flaky_before {
                continue;
            }
            break;
        }
        self.together(&all)
    }

    /// Changes that only work together: is there a fix at all, and which is minimal?
    pub(super) fn together(&mut self, all: &[usize]) -> Result<Option<Vec<usize>>, Stopped> {
        let everything = self.largest_valid(all);
        if self.evaluate(&self.space.strong(&everything))? != Eval::Pass {
            // One change may undo another (`--highvram` turns Dynamic VRAM back off for a
            // `--disable-dynamic-vram` that fixes it): each that ComfyUI's flag model says is
            // undone with every change is tried on its own.
            // (Not one that failed elsewhere with more changes that did not undo it.)
            for d in all {
                if self.space.undone(*d, &self.space.strong(&everything))
                    && self.failed_with_more(&self.space.strong(&[*d])).is_none()
                    && self.evaluate(&self.space.strong(&[*d]))? == Eval::Pass
                {
                    return Ok(Some(vec![*d]));
                }
            }
            return Ok(None);
        }
        let mut minimal = self.minimize(&[], &everything)?;
        minimal.sort_unstable();
        Ok(Some(minimal))
    }

    /// The dimensions of `dims` that can be applied together (greedy, in order).
    pub(super) fn largest_valid(&self, dims: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for d in dims {
            let mut with = out.clone();
            with.push(*d);
            if self.space.config(&self.space.strong(&with)).is_some() {
                out = with;
            }
        }
        out
    }

    /// The minimal subset of `candidates` that, added to `base`, makes the run pass, given
    /// that `base` plus all of `candidates` passes (Junker's QuickXplain: about
    /// d·log2(k/d) runs for d changes that must act together among k).
    pub(super) fn minimize(
        &mut self,
        base: &[usize],
        candidates: &[usize],
    ) -> Result<Vec<usize>, Stopped> {
        if candidates.len() <= 1 {
            // The baseline fails, so with nothing added the candidate is needed.
            let base_alone_passes = !base.is_empty() && self.passes_with(base, &[])?;
            return Ok(if base_alone_passes {
                Vec::new()
            } else {
                candidates.to_vec()
            });
        }
        let (c1, c2) = candidates.split_at(candidates.len().div_ceil(2));
        if self.passes_with(base, c1)? {
            return self.minimize(base, c1);
        }
        if self.passes_with(base, c2)? {
            return self.minimize(base, c2);
        }
        // Both halves hold something needed.
        let with_c1: Vec<usize> = base.iter().chain(c1).copied().collect();
        let m2 = self.minimize(&with_c1, c2)?;
        let with_m2: Vec<usize> = base.iter().chain(&m2).copied().collect();
        let m1 = self.minimize(&with_m2, c1)?;
        Ok(m1.into_iter().chain(m2).collect())
    }

    pub(super) fn passes_with(&mut self, base: &[usize], extra: &[usize]) -> Result<bool, Stopped> {
        let mut dims: Vec<usize> = base.iter().chain(extra).copied().collect();
        dims.sort_unstable();
        dims.dedup();
        Ok(self.evaluate(&self.space.strong(&dims))? == Eval::Pass)
    }

    /// One change at a time; the first (in the order given) that fixes it.
    pub(super) fn each(&mut self) -> Result<Option<Choice>, Stopped> {
        let mut first: Option<Choice> = None;
        for d in 0..self.space.dims.len() {
            for a in 0..self.space.dims[d].alternatives() {
                let choice = vec![(d, a)];
                if self.evaluate(&choice)? == Eval::Pass && first.is_none() {
                    first = Some(choice);
                }
            }
        }
        Ok(first)
    }

    /// Every valid combination; the passing one with the fewest changes (then least values).
    pub(super) fn matrix(&mut self) -> Result<Option<Choice>, Stopped> {
        let mut best: Option<Choice> = None;
        for choice in all_choices(self.space) {
            if self.evaluate(&choice)? == Eval::Pass {
                let better = match &best {
                    None => true,
                    Some(b) => (choice.len(), weight(&choice)) < (b.len(), weight(b)),
                };
                if better {
                    best = Some(choice);
                }
            }
        }
        Ok(best)
    }
}
