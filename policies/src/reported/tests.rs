use super::*;
use crate::cache::{learn, Lesson};
use crate::cost::{cost, Price};
use proptest::prelude::*;
use serde_json::{json, Value};

/// The request of issue 44: about 1,700 tokens sent into a 131,072-token window.
fn sent() -> Sent {
    Sent { prompt: Tokens(1_712), answer: Tokens(40), window: Tokens(131_072), max_output: None }
}

fn figure(key: &str, value: Value) -> Option<Figure> {
    Some(Figure::of(key, &value))
}

/// An OpenAI-style report: the prompt counts its cached part.
fn openai(prompt: Value, completion: Value, cached: Option<Value>) -> RawUsage {
    RawUsage {
        prompt: figure("prompt_tokens", prompt),
        completion: figure("completion_tokens", completion),
        cache_read: cached.and_then(|c| figure("prompt_tokens_details.cached_tokens", c)),
        ..RawUsage::default()
    }
}

#[test]
fn a_plausible_report_is_believed_whole() {
    let judged = judge(&openai(json!(1_730), json!(40), Some(json!(1_024))), &sent());
    let usage = Usage { cache_read_tokens: 1_024, ..Usage::new(1_730, 40) };
    assert_eq!(judged, Judged { counted: usage, believed: Some(usage), refused: vec![] });
}

#[test]
fn five_million_prompt_tokens_for_a_small_request_are_refused_and_what_was_sent_counted() {
    let judged = judge(&openai(json!(5_000_000), json!(40), None), &sent());
    assert_eq!(judged.believed, None);
    assert_eq!(judged.counted, Usage::new(1_712, 40));
    assert_eq!(
        judged.reasons(),
        vec![
            "`prompt_tokens` 5000000 is above the 131072-token window and more than 4 × the 1712 tokens sent"
        ]
    );
}

#[test]
fn a_prompt_above_our_count_but_within_the_window_or_near_our_count_is_believed() {
    // A server whose template and tokenizer count three times ours, inside the window.
    let judged = judge(&openai(json!(5_200), json!(40), None), &sent());
    assert!(judged.believed.is_some(), "{judged:?}");
    // Past a window believed too small, by a little more than ours: the window was wrong.
    let small = Sent { window: Tokens(2_048), prompt: Tokens(5_000), ..sent() };
    assert!(judge(&openai(json!(5_400), json!(40), None), &small).believed.is_some());
}

#[test]
fn every_figure_of_two_to_the_sixty_four_less_one_is_refused_without_a_wrap() {
    let raw = RawUsage {
        prompt: figure("input_tokens", json!(u64::MAX)),
        completion: figure("output_tokens", json!(u64::MAX)),
        ..RawUsage::default()
    };
    let judged = judge(&raw, &sent());
    assert_eq!(judged.counted, Usage::new(1_712, 40));
    assert_eq!(
        judged.refused.iter().map(Refusal::which).collect::<Vec<_>>(),
        [Which::Prompt, Which::Completion]
    );
    // Anthropic's prompt is summed from three figures: past 2^64 − 1, refused, never wrapped.
    let anthropic = RawUsage {
        prompt: figure("input_tokens", json!(u64::MAX)),
        completion: figure("output_tokens", json!(3)),
        cache_read: figure("cache_read_input_tokens", json!(5)),
        cache_write: None,
        cache_apart: true,
    };
    let judged = judge(&anthropic, &sent());
    assert!(matches!(judged.refused[..], [Refusal::PromptPastCounting { .. }]), "{judged:?}");
    assert_eq!(judged.counted, Usage::new(1_712, 3), "no cache share of a prompt not believed");
}

#[test]
fn cached_tokens_fifty_times_the_prompt_are_refused_and_teach_no_cache() {
    let judged = judge(&openai(json!(1_730), json!(40), Some(json!(86_500))), &sent());
    assert_eq!(judged.believed, None);
    assert_eq!(judged.counted, Usage::new(1_730, 40), "the prompt believed, no cache share");
    assert_eq!(
        judged.reasons(),
        vec!["`prompt_tokens_details.cached_tokens` 86500 is more than the prompt's 1730 tokens"]
    );
    assert_eq!(learn(None, &judged.counted, None), Lesson::Nothing);
}

#[test]
fn figures_that_are_no_counts_are_refused_with_what_was_said() {
    for (said, shown) in [
        (json!("NaN"), "NaN"),
        (json!(-3), "-3"),
        (json!(1.5), "1.5"),
        (json!("12"), "\"12\""),
        (Value::Null, "null"),
    ] {
        let judged = judge(&openai(said, json!(40), None), &sent());
        assert_eq!(judged.counted, Usage::new(1_712, 40));
        assert_eq!(judged.reasons(), vec![format!("`prompt_tokens` is {shown}, not a count of tokens")]);
    }
    let judged = judge(
        &RawUsage { completion: figure("completion_tokens", json!(4)), ..RawUsage::default() },
        &sent(),
    );
    assert_eq!(judged.reasons(), vec!["the report has no prompt figure"]);
    // A cache figure left null is no refusal: the cache was not involved.
    assert!(judge(&openai(json!(1_700), json!(4), Some(Value::Null)), &sent()).believed.is_some());
}

#[test]
fn an_answer_past_twice_the_window_or_its_limit_is_refused() {
    let limited = Sent { max_output: Some(300_000), ..sent() };
    assert_eq!(limited.answer_bound(), 600_000);
    assert!(judge(&openai(json!(1_700), json!(600_000), None), &limited).believed.is_some());
    let judged = judge(&openai(json!(1_700), json!(600_001), None), &limited);
    assert_eq!(judged.counted, Usage::new(1_700, 40));
    assert_eq!(sent().answer_bound(), 262_144);
}

/// A figure as a server might say it: counts small and huge, and every kind of thing that is not one.
fn any_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        3 => (0u64..300_000).prop_map(|n| Some(json!(n))),
        1 => any::<u64>().prop_map(|n| Some(json!(n))),
        1 => Just(Some(json!(u64::MAX))),
        1 => (i64::MIN..0).prop_map(|n| Some(json!(n))),
        1 => any::<f64>().prop_map(|f| Some(json!(f))),
        1 => prop_oneof![Just("NaN"), Just("Infinity"), Just("-Infinity"), Just("12")].prop_map(|s| Some(json!(s))),
        1 => Just(Some(Value::Null)),
        1 => Just(None),
    ]
}

fn any_raw() -> impl Strategy<Value = RawUsage> {
    (any_value(), any_value(), any_value(), any_value(), any::<bool>()).prop_map(|(p, c, r, w, apart)| {
        RawUsage {
            prompt: p.map(|v| Figure::of("prompt_tokens", &v)),
            completion: c.map(|v| Figure::of("completion_tokens", &v)),
            cache_read: r.map(|v| Figure::of("cached_tokens", &v)),
            cache_write: w.map(|v| Figure::of("cache_creation_input_tokens", &v)),
            cache_apart: apart,
        }
    })
}

fn any_sent() -> impl Strategy<Value = Sent> {
    (0u64..500_000, 0u64..50_000, 1u64..2_000_000, proptest::option::of(any::<u32>())).prop_map(
        |(prompt, answer, window, max_output)| Sent {
            prompt: Tokens(prompt),
            answer: Tokens(answer),
            window: Tokens(window),
            max_output,
        },
    )
}

proptest! {
    /// Whatever a server reports: no panic; what is counted is within the bounds (never a wrapped or
    /// absurd figure), the cache's share within the prompt, a refused figure replaced by ours (or 0)
    /// so it reaches no price, budget or cache, and only a report with nothing refused is believed.
    #[test]
    fn no_report_is_believed_past_what_was_sent_and_no_refused_figure_is_counted(
        raw in any_raw(),
        sent in any_sent(),
    ) {
        let judged = judge(&raw, &sent);
        let counted = judged.counted;
        prop_assert_eq!(judged.believed.is_some(), judged.refused.is_empty());
        if let Some(believed) = judged.believed {
            prop_assert_eq!(believed, counted);
        }
        prop_assert!(counted.prompt_tokens <= sent.prompt_bound());
        prop_assert!(counted.completion_tokens <= sent.answer_bound().max(sent.answer.0));
        let cached = counted.cache_read_tokens.checked_add(counted.cache_write_tokens);
        prop_assert!(cached.is_some_and(|c| c <= counted.prompt_tokens));
        for refusal in &judged.refused {
            match refusal.which() {
                Which::Prompt => prop_assert_eq!(counted.prompt_tokens, sent.prompt.0),
                Which::Completion => prop_assert_eq!(counted.completion_tokens, sent.answer.0),
                Which::CacheRead => prop_assert_eq!(counted.cache_read_tokens, 0),
                Which::CacheWrite => prop_assert_eq!(counted.cache_write_tokens, 0),
            }
            prop_assert!(!refusal.to_string().is_empty());
        }
        if judged.refused.iter().any(|r| r.which() == Which::CacheRead) {
            prop_assert_eq!(learn(None, &counted, None), Lesson::Nothing, "a refused cache figure teaches no cache");
        }
        let price = Price { input: 15.0, cached_input: Some(1.5), cache_write: None, output: 60.0 };
        prop_assert!(cost(&counted, &price).is_finite());
    }

    /// A report within the bounds is believed as it was said: no legitimate usage is refused.
    #[test]
    fn a_report_within_the_bounds_is_believed_as_said(
        sent in any_sent(),
        prompt_share in 0.0f64..=1.0,
        completion_share in 0.0f64..=1.0,
        cached_share in 0.0f64..=1.0,
    ) {
        let prompt = (sent.prompt_bound() as f64 * prompt_share) as u64;
        let completion = (sent.answer_bound() as f64 * completion_share) as u64;
        let cached = (prompt as f64 * cached_share) as u64;
        let raw = openai(json!(prompt), json!(completion), Some(json!(cached)));
        let usage = Usage { cache_read_tokens: cached, ..Usage::new(prompt, completion) };
        prop_assert_eq!(judge(&raw, &sent).believed, Some(usage));
    }
}
