//! What work costs and how much of it a session may do: [`PriceTable`] turns a request's token
//! counts into dollars, a [`Meter`] sums a session's requests (and, through its children's
//! meters, its whole delegation subtree), and a [`Budget`] says when to stop.
//!
//! A meter adds every request to itself and to each ancestor's meter at once, so a parent sees
//! its children's spending while they run, and a child checks every ancestor's budget: it never
//! spends more than its parent has left, however many siblings run beside it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Usage;

/// Dollars per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Price {
    /// Prompt tokens not served from the provider's cache.
    pub input: f64,
    /// Generated tokens.
    pub output: f64,
    /// Prompt tokens served from the cache (often a tenth of `input`).
    pub cached_input: f64,
}

impl Price {
    /// The dollars of one request's usage.
    pub fn cost(&self, usage: Usage) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let fresh = usage.prompt_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + usage.completion_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// List prices of some widely used hosted models (USD per million tokens, as published by their
/// providers in 2025), so a cost budget works without a `pricing:` section. Local models are
/// free and are not listed: a request to a model with no price costs nothing and is counted as
/// unpriced.
const LIST_PRICES: &[(&str, Price)] = &[
    ("gpt-4o", price(2.50, 10.00, 1.25)),
    ("gpt-4o-mini", price(0.15, 0.60, 0.075)),
    ("gpt-4.1", price(2.00, 8.00, 0.50)),
    ("gpt-4.1-mini", price(0.40, 1.60, 0.10)),
    ("gpt-4.1-nano", price(0.10, 0.40, 0.025)),
    ("o3", price(2.00, 8.00, 0.50)),
    ("o4-mini", price(1.10, 4.40, 0.275)),
    ("gpt-5", price(1.25, 10.00, 0.125)),
    ("gpt-5-mini", price(0.25, 2.00, 0.025)),
    ("claude-sonnet-4", price(3.00, 15.00, 0.30)),
    ("claude-opus-4", price(15.00, 75.00, 1.50)),
    ("claude-3-5-haiku", price(0.80, 4.00, 0.08)),
    ("gemini-2.5-pro", price(1.25, 10.00, 0.31)),
    ("gemini-2.5-flash", price(0.30, 2.50, 0.075)),
    ("deepseek-chat", price(0.27, 1.10, 0.07)),
];

const fn price(input: f64, output: f64, cached_input: f64) -> Price {
    Price {
        input,
        output,
        cached_input,
    }
}

/// Prices by model name: the list prices, overridden and extended by `pricing:` in troupe.yaml.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            prices: LIST_PRICES
                .iter()
                .map(|(name, price)| (name.to_string(), *price))
                .collect(),
        }
    }
}

impl PriceTable {
    /// A table with no prices at all.
    pub fn empty() -> Self {
        PriceTable {
            prices: HashMap::new(),
        }
    }

    /// Sets (or replaces) a model's price.
    pub fn set(&mut self, model: impl Into<String>, price: Price) {
        self.prices.insert(model.into().to_ascii_lowercase(), price);
    }

    /// The price of `model`: its own entry, else the entry of the name without a
    /// `provider/` prefix, else without a trailing date (`gpt-4o-2024-08-06`, `…-20250514`).
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let lower = model.trim().to_ascii_lowercase();
        let bare = lower.rsplit('/').next().unwrap_or(&lower);
        [lower.as_str(), bare, without_date(bare)]
            .into_iter()
            .find_map(|name| self.prices.get(name).copied())
    }
}

impl PriceTable {
    /// The list prices with the `pricing:` section of troupe.yaml laid over them: a mapping of
    /// model name to `{input, output, cached_input}` dollars per million tokens (`cached_input`
    /// defaults to `input`). Errors name the key and say what to write.
    pub fn from_value(raw: &Value) -> Result<PriceTable, String> {
        let mut table = PriceTable::default();
        let map = match raw {
            Value::Null => return Ok(table),
            Value::Object(map) => map,
            other => {
                return Err(format!(
                    "pricing: expected a mapping of model name to prices, such as {{gpt-4o: {{input: 2.5, output: 10}}}} (dollars per million tokens), found {other}"
                ));
            }
        };
        for (model, entry) in map {
            let key = format!("pricing.{model}");
            let Value::Object(fields) = entry else {
                return Err(format!(
                    "{key}: expected {{input: DOLLARS, output: DOLLARS}} per million tokens (cached_input optional), found {entry}"
                ));
            };
            if let Some(unknown) = fields
                .keys()
                .find(|k| !["input", "output", "cached_input"].contains(&k.as_str()))
            {
                return Err(format!(
                    "{key}.{unknown}: not a price; write input, output and optionally cached_input (dollars per million tokens)"
                ));
            }
            let dollars = |field: &str| -> Result<Option<f64>, String> {
                match fields.get(field) {
                    None | Some(Value::Null) => Ok(None),
                    Some(value) => value
                        .as_f64()
                        .filter(|d| d.is_finite() && *d >= 0.0)
                        .map(Some)
                        .ok_or_else(|| {
                            format!("{key}.{field}: expected dollars per million tokens, 0 or more, such as 2.5, found {value}")
                        }),
                }
            };
            let (Some(input), Some(output)) = (dollars("input")?, dollars("output")?) else {
                return Err(format!(
                    "{key}: both input and output are needed (dollars per million tokens), such as {{input: 2.5, output: 10}}"
                ));
            };
            let cached_input = dollars("cached_input")?.unwrap_or(input);
            table.set(
                model.clone(),
                Price {
                    input,
                    output,
                    cached_input,
                },
            );
        }
        Ok(table)
    }
}

/// `name` without a trailing `-YYYY-MM-DD` or `-YYYYMMDD`.
fn without_date(name: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, date)) = name.rsplit_once('-')
        && date.len() == 8
        && digits(date)
    {
        return head;
    }
    let parts: Vec<&str> = name.rsplitn(4, '-').collect();
    if let [day, month, year, head] = parts[..]
        && day.len() == 2
        && month.len() == 2
        && year.len() == 4
        && [day, month, year].into_iter().all(digits)
    {
        return head;
    }
    name
}

/// Limits on what a session (with its subagents) may spend. `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Prompt and generated tokens together.
    pub max_tokens: Option<u64>,
    /// Dollars, by the price table.
    pub max_cost_usd: Option<f64>,
    /// Seconds spent working (turns running; a session waiting for its user does not count).
    pub max_wall_seconds: Option<f64>,
}

impl Budget {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_tokens.is_some() || self.max_cost_usd.is_some() || self.max_wall_seconds.is_some()
    }

    /// Each limit the tighter of the two.
    pub fn tighter(self, other: Budget) -> Budget {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        Budget {
            max_tokens: min(self.max_tokens, other.max_tokens),
            max_cost_usd: min(self.max_cost_usd, other.max_cost_usd),
            max_wall_seconds: min(self.max_wall_seconds, other.max_wall_seconds),
        }
    }

    /// Reads a budget mapping (`max_tokens`, `max_cost_usd`, `max_wall_seconds`) found at
    /// `key` in a config file or a request; `null` is no budget. Errors name the key.
    pub fn from_value(key: &str, raw: &Value) -> Result<Budget, String> {
        let map = match raw {
            Value::Null => return Ok(Budget::default()),
            Value::Object(map) => map,
            other => {
                return Err(format!(
                    "{key}: expected a mapping such as {{max_tokens: 200000, max_cost_usd: 2.5, max_wall_seconds: 600}}, found {other}"
                ));
            }
        };
        if let Some(unknown) = map
            .keys()
            .find(|k| !["max_tokens", "max_cost_usd", "max_wall_seconds"].contains(&k.as_str()))
        {
            return Err(format!(
                "{key}.{unknown}: not a budget limit; the limits are max_tokens, max_cost_usd and max_wall_seconds"
            ));
        }
        let positive = |field: &str, example: &str| -> Result<Option<f64>, String> {
            match map.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(value) => value
                    .as_f64()
                    .filter(|n| n.is_finite() && *n > 0.0)
                    .map(Some)
                    .ok_or_else(|| {
                        format!("{key}.{field}: expected a number above 0 such as {example} (leave it out for no limit), found {value}")
                    }),
            }
        };
        let max_tokens = match map.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                format!("{key}.max_tokens: expected a whole number of tokens above 0 such as 200000 (leave it out for no limit), found {value}")
            })?),
        };
        Ok(Budget {
            max_tokens,
            max_cost_usd: positive("max_cost_usd", "2.5")?,
            max_wall_seconds: positive("max_wall_seconds", "600")?,
        })
    }

    /// The first limit `spent` reached, if any.
    fn reached(&self, spent: &Spend) -> Option<(BudgetLimit, f64, f64)> {
        if let Some(max) = self.max_tokens
            && spent.tokens() >= max
        {
            return Some((BudgetLimit::Tokens, spent.tokens() as f64, max as f64));
        }
        if let Some(max) = self.max_cost_usd
            && spent.cost_usd >= max
        {
            return Some((BudgetLimit::CostUsd, spent.cost_usd, max));
        }
        if let Some(max) = self.max_wall_seconds
            && spent.wall_seconds >= max
        {
            return Some((BudgetLimit::WallSeconds, spent.wall_seconds, max));
        }
        None
    }
}

/// Which limit of a [`Budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    /// `max_tokens`.
    Tokens,
    /// `max_cost_usd`.
    CostUsd,
    /// `max_wall_seconds`.
    WallSeconds,
}

impl BudgetLimit {
    /// The config key.
    pub fn key(self) -> &'static str {
        match self {
            BudgetLimit::Tokens => "max_tokens",
            BudgetLimit::CostUsd => "max_cost_usd",
            BudgetLimit::WallSeconds => "max_wall_seconds",
        }
    }
}

/// A value of `limit` as people read it: `1200 tokens`, `$0.5000`, `90.0 s`.
pub fn format_limit(limit: BudgetLimit, value: f64) -> String {
    match limit {
        BudgetLimit::Tokens => format!("{} tokens", value.round()),
        BudgetLimit::CostUsd => format!("${value:.4}"),
        BudgetLimit::WallSeconds => format!("{value:.1} s"),
    }
}

/// A budget that ran out: which limit, whose, and by how much.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exhausted {
    /// The limit reached.
    pub limit: BudgetLimit,
    /// What was spent against it.
    pub used: f64,
    /// The limit.
    pub allowed: f64,
    /// 0 for the session's own budget, 1 for its parent's, and so on up the tree.
    pub ancestor: usize,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = match self.ancestor {
            0 => "this session's",
            1 => "the parent session's",
            _ => "an ancestor session's",
        };
        match self.limit {
            BudgetLimit::Tokens => write!(
                f,
                "{whose} token budget is spent ({} of {} tokens, budget.max_tokens)",
                self.used, self.allowed
            ),
            BudgetLimit::CostUsd => write!(
                f,
                "{whose} cost budget is spent (${:.4} of ${:.4}, budget.max_cost_usd)",
                self.used, self.allowed
            ),
            BudgetLimit::WallSeconds => write!(
                f,
                "{whose} time budget is spent ({:.1} s of {:.1} s working, budget.max_wall_seconds)",
                self.used, self.allowed
            ),
        }
    }
}

/// What a session (with its subtree) has spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spend {
    /// Model requests answered.
    pub requests: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache (part of `input_tokens`).
    pub cached_tokens: u64,
    /// Dollars, for the requests whose model has a price.
    pub cost_usd: f64,
    /// Requests to a model with no price (their cost is not in `cost_usd`).
    pub unpriced_requests: u64,
    /// Seconds spent working.
    pub wall_seconds: f64,
}

impl Spend {
    /// Prompt and generated tokens together.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// What was spent since `earlier` (a snapshot of the same meter).
    pub fn since(&self, earlier: &Spend) -> Spend {
        Spend {
            requests: self.requests.saturating_sub(earlier.requests),
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cached_tokens: self.cached_tokens.saturating_sub(earlier.cached_tokens),
            cost_usd: (self.cost_usd - earlier.cost_usd).max(0.0),
            unpriced_requests: self
                .unpriced_requests
                .saturating_sub(earlier.unpriced_requests),
            wall_seconds: (self.wall_seconds - earlier.wall_seconds).max(0.0),
        }
    }
}

/// Dollars are kept as whole nano-dollars so they add up atomically and exactly.
const NANOS_PER_USD: f64 = 1e9;

/// One session's running totals, shared with its children's meters. See the module doc.
#[derive(Debug)]
pub struct Meter {
    parent: Option<Arc<Meter>>,
    /// The limits as set; an extension adds one of these again.
    granted: Budget,
    /// The limits now (a person may have extended them).
    budget: Mutex<Budget>,
    requests: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    cost_nanos: AtomicU64,
    unpriced: AtomicU64,
    /// Milliseconds of finished turns.
    busy_ms: AtomicU64,
    /// When the running turn began.
    working_since: Mutex<Option<Instant>>,
}

impl Meter {
    /// A meter for a session with no parent.
    pub fn root(budget: Budget) -> Arc<Meter> {
        Arc::new(Meter::new(None, budget))
    }

    /// A meter for a child of the session `parent` meters.
    pub fn child(parent: &Arc<Meter>, budget: Budget) -> Arc<Meter> {
        Arc::new(Meter::new(Some(Arc::clone(parent)), budget))
    }

    fn new(parent: Option<Arc<Meter>>, budget: Budget) -> Meter {
        Meter {
            parent,
            granted: budget,
            budget: Mutex::new(budget),
            requests: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            cost_nanos: AtomicU64::new(0),
            unpriced: AtomicU64::new(0),
            busy_ms: AtomicU64::new(0),
            working_since: Mutex::new(None),
        }
    }

    /// This session's own limits.
    pub fn budget(&self) -> Budget {
        self.budget.lock().map(|b| *b).unwrap_or(self.granted)
    }

    /// What extending `spent` would raise its limit to: the limit it ran out at plus the
    /// amount first granted, so a person answering twice for the same shortfall (two children
    /// waiting on their parent's budget) extends it once.
    pub fn extension_of(&self, spent: &Exhausted) -> Option<f64> {
        let granted = self.ancestor(spent.ancestor)?.granted;
        let step = match spent.limit {
            BudgetLimit::Tokens => granted.max_tokens.map(|t| t as f64),
            BudgetLimit::CostUsd => granted.max_cost_usd,
            BudgetLimit::WallSeconds => granted.max_wall_seconds,
        }?;
        Some(spent.allowed + step)
    }

    /// Raises the limit `spent` ran out at (on the meter whose budget it was) to at least `to`.
    /// A time budget is raised to at least the first grant beyond the time worked by now: the
    /// work went on while the person read the question, and that wait must not eat what they
    /// gave (or they would be asked again at once).
    pub fn extend(&self, spent: &Exhausted, to: f64) {
        let Some(meter) = self.ancestor(spent.ancestor) else {
            return;
        };
        let to = match (spent.limit, meter.granted.max_wall_seconds) {
            (BudgetLimit::WallSeconds, Some(step)) => to.max(meter.working().as_secs_f64() + step),
            _ => to,
        };
        let Ok(mut budget) = meter.budget.lock() else {
            return;
        };
        let raise = |limit: &mut Option<f64>| {
            if let Some(limit) = limit {
                *limit = limit.max(to);
            }
        };
        match spent.limit {
            BudgetLimit::Tokens => {
                if let Some(limit) = budget.max_tokens.as_mut() {
                    *limit = (*limit).max(to.round() as u64);
                }
            }
            BudgetLimit::CostUsd => raise(&mut budget.max_cost_usd),
            BudgetLimit::WallSeconds => raise(&mut budget.max_wall_seconds),
        }
    }

    /// This meter (0), its parent's (1), and so on up.
    fn ancestor(&self, mut up: usize) -> Option<&Meter> {
        let mut meter = self;
        while up > 0 {
            meter = meter.parent.as_deref()?;
            up -= 1;
        }
        Some(meter)
    }

    /// Adds one answered request, priced at `cost` (`None`: the model has no price), here and
    /// in every ancestor.
    pub fn record(&self, usage: Usage, cost: Option<f64>) {
        let nanos = cost.map(|c| (c.max(0.0) * NANOS_PER_USD).round() as u64);
        let mut meter = Some(self);
        while let Some(m) = meter {
            m.requests.fetch_add(1, Ordering::Relaxed);
            m.input_tokens
                .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
            m.output_tokens
                .fetch_add(usage.completion_tokens, Ordering::Relaxed);
            m.cached_tokens
                .fetch_add(usage.cached_tokens, Ordering::Relaxed);
            match nanos {
                Some(nanos) => m.cost_nanos.fetch_add(nanos, Ordering::Relaxed),
                None => m.unpriced.fetch_add(1, Ordering::Relaxed),
            };
            meter = m.parent.as_deref();
        }
    }

    /// Adds what a reopened session had spent before (its own totals, which already hold its
    /// subtree's); the ancestors' totals are their own to restore.
    pub fn restore(&self, spent: &Spend) {
        self.requests.fetch_add(spent.requests, Ordering::Relaxed);
        self.input_tokens
            .fetch_add(spent.input_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(spent.output_tokens, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(spent.cached_tokens, Ordering::Relaxed);
        let nanos = (spent.cost_usd.max(0.0) * NANOS_PER_USD).round() as u64;
        self.cost_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.unpriced
            .fetch_add(spent.unpriced_requests, Ordering::Relaxed);
        let ms = (spent.wall_seconds.max(0.0) * 1000.0).round() as u64;
        self.busy_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// A turn begins: working time counts from now.
    pub fn start_work(&self) {
        if let Ok(mut since) = self.working_since.lock() {
            since.get_or_insert_with(Instant::now);
        }
    }

    /// The turn ended: its time is added to the finished turns'.
    pub fn stop_work(&self) {
        let started = self.working_since.lock().ok().and_then(|mut s| s.take());
        if let Some(started) = started {
            let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.busy_ms.fetch_add(ms, Ordering::Relaxed);
        }
    }

    fn working(&self) -> Duration {
        let running = self
            .working_since
            .lock()
            .ok()
            .and_then(|s| s.map(|started| started.elapsed()))
            .unwrap_or_default();
        Duration::from_millis(self.busy_ms.load(Ordering::Relaxed)) + running
    }

    /// What this session and its subtree have spent so far.
    pub fn spent(&self) -> Spend {
        Spend {
            requests: self.requests.load(Ordering::Relaxed),
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            cached_tokens: self.cached_tokens.load(Ordering::Relaxed),
            cost_usd: self.cost_nanos.load(Ordering::Relaxed) as f64 / NANOS_PER_USD,
            unpriced_requests: self.unpriced.load(Ordering::Relaxed),
            wall_seconds: self.working().as_secs_f64(),
        }
    }

    /// The first budget that ran out, this session's or an ancestor's.
    pub fn exhausted(&self) -> Option<Exhausted> {
        let mut meter = Some(self);
        let mut ancestor = 0;
        while let Some(m) = meter {
            let budget = m.budget();
            if budget.is_limited()
                && let Some((limit, used, allowed)) = budget.reached(&m.spent())
            {
                return Some(Exhausted {
                    limit,
                    used,
                    allowed,
                    ancestor,
                });
            }
            ancestor += 1;
            meter = m.parent.as_deref();
        }
        None
    }

    /// How long until a time budget here or above runs out, if one is set.
    pub fn wall_left(&self) -> Option<Duration> {
        let mut left: Option<f64> = None;
        let mut meter = Some(self);
        while let Some(m) = meter {
            if let Some(max) = m.budget().max_wall_seconds {
                let here = (max - m.working().as_secs_f64()).max(0.0);
                left = Some(left.map_or(here, |l| l.min(here)));
            }
            meter = m.parent.as_deref();
        }
        left.map(Duration::from_secs_f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64, cached: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: cached,
        }
    }

    #[test]
    fn cached_prompt_tokens_are_priced_apart() {
        let p = price(2.0, 8.0, 0.5);
        let cost = p.cost(usage(1_000_000, 500_000, 400_000));
        // 600k fresh at $2, 400k cached at $0.5, 500k out at $8.
        assert!((cost - (1.2 + 0.2 + 4.0)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn prices_are_found_through_prefixes_and_dates() {
        let mut table = PriceTable::default();
        assert_eq!(table.lookup("gpt-4o-mini"), Some(price(0.15, 0.60, 0.075)));
        assert_eq!(table.lookup("openai/GPT-4o"), table.lookup("gpt-4o"));
        assert_eq!(table.lookup("gpt-4o-2024-08-06"), table.lookup("gpt-4o"));
        assert_eq!(
            table.lookup("claude-sonnet-4-20250514"),
            table.lookup("claude-sonnet-4")
        );
        assert_eq!(table.lookup("qwen2.5-coder-1.5b"), None);
        assert_eq!(table.lookup("gpt-4o-audio"), None, "only dates are dropped");
        table.set("Qwen2.5-Coder-1.5B", price(0.0, 0.0, 0.0));
        assert!(table.lookup("qwen2.5-coder-1.5b").is_some());
    }

    #[test]
    fn children_spend_against_every_ancestor() {
        let root = Meter::root(Budget {
            max_tokens: Some(100),
            ..Budget::default()
        });
        let child = Meter::child(
            &root,
            Budget {
                max_tokens: Some(1_000),
                ..Budget::default()
            },
        );
        let sibling = Meter::child(&root, Budget::default());
        child.record(usage(40, 10, 0), Some(0.5));
        sibling.record(usage(40, 0, 0), None);
        assert_eq!(root.spent().tokens(), 90);
        assert_eq!(root.spent().unpriced_requests, 1);
        assert!((root.spent().cost_usd - 0.5).abs() < 1e-9);
        assert!(child.exhausted().is_none());
        sibling.record(usage(10, 0, 0), None);
        // The child's own budget is far off; its parent's is spent.
        let spent = child.exhausted().expect("the parent's budget is spent");
        assert_eq!(spent.ancestor, 1);
        assert_eq!(spent.limit, BudgetLimit::Tokens);
        assert!(spent.to_string().contains("parent"), "{spent}");
    }

    #[test]
    fn budgets_and_prices_are_read_with_clear_errors() {
        let budget = Budget::from_value(
            "budget",
            &serde_json::json!({"max_tokens": 1000, "max_cost_usd": 0.5}),
        )
        .unwrap();
        assert_eq!(budget.max_tokens, Some(1000));
        assert_eq!(budget.max_cost_usd, Some(0.5));
        assert_eq!(budget.max_wall_seconds, None);
        for (bad, says) in [
            (
                serde_json::json!({"max_token": 5}),
                "budget.max_token: not a budget limit",
            ),
            (
                serde_json::json!({"max_tokens": -5}),
                "budget.max_tokens: expected a whole number",
            ),
            (
                serde_json::json!({"max_cost_usd": "lots"}),
                "budget.max_cost_usd: expected a number above 0",
            ),
            (serde_json::json!(7), "budget: expected a mapping"),
        ] {
            let error = Budget::from_value("budget", &bad).unwrap_err();
            assert!(error.starts_with(says), "{error}");
        }
        let table = PriceTable::from_value(&serde_json::json!({
            "local-qwen": {"input": 0, "output": 0},
            "gpt-4o": {"input": 1, "output": 2, "cached_input": 0.1},
        }))
        .unwrap();
        assert_eq!(table.lookup("local-qwen"), Some(price(0.0, 0.0, 0.0)));
        assert_eq!(table.lookup("gpt-4o"), Some(price(1.0, 2.0, 0.1)));
        assert!(table.lookup("gpt-4o-mini").is_some(), "list prices stay");
        let error = PriceTable::from_value(&serde_json::json!({"m": {"input": 1}})).unwrap_err();
        assert!(
            error.contains("pricing.m: both input and output"),
            "{error}"
        );
        let error =
            PriceTable::from_value(&serde_json::json!({"m": {"input": 1, "output": 1, "in": 2}}))
                .unwrap_err();
        assert!(error.contains("pricing.m.in: not a price"), "{error}");
    }

    #[test]
    fn tighter_takes_each_smaller_limit() {
        let a = Budget {
            max_tokens: Some(10),
            max_cost_usd: None,
            max_wall_seconds: Some(5.0),
        };
        let b = Budget {
            max_tokens: Some(20),
            max_cost_usd: Some(1.0),
            max_wall_seconds: None,
        };
        assert_eq!(
            a.tighter(b),
            Budget {
                max_tokens: Some(10),
                max_cost_usd: Some(1.0),
                max_wall_seconds: Some(5.0),
            }
        );
    }

    #[test]
    fn working_time_counts_only_turns() {
        let meter = Meter::root(Budget::default());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(meter.spent().wall_seconds, 0.0);
        meter.start_work();
        std::thread::sleep(Duration::from_millis(20));
        meter.stop_work();
        let wall = meter.spent().wall_seconds;
        assert!(wall >= 0.02, "{wall}");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(meter.spent().wall_seconds, wall);
    }
}
