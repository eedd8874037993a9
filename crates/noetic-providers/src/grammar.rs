//! The OpenResponses event grammar as a test oracle, for the Chat translation's unit tests and the
//! property tests of `bad_bytes`. It depends on no other module of the crate, so both can use it
//! without a cycle between them.

use noetic_core::ResponseEvent;

/// The OpenResponses order rules the Chat translation promises, even on bad data: `Created` first;
/// items open at output indexes 0, 1, 2, …; deltas only for open items; each item closes once, in
/// output order; at most one terminal event, last, after every item closed.
pub(crate) fn grammar_violation(events: &[ResponseEvent]) -> Option<String> {
    let mut open: Vec<bool> = Vec::new();
    let mut last_done: Option<u32> = None;
    let mut finished = false;
    for (position, event) in events.iter().enumerate() {
        if finished {
            return Some(format!("{event:?} after the terminal event"));
        }
        let is_open = |index: u32| open.get(index as usize).copied().unwrap_or(false);
        match event {
            ResponseEvent::Created { .. } if position != 0 => {
                return Some("`Created` is not first".to_owned());
            }
            ResponseEvent::OutputItemAdded { output_index, .. } => {
                if *output_index as usize != open.len() {
                    return Some(format!("{event:?} opens out of order"));
                }
                open.push(true);
            }
            ResponseEvent::OutputTextDelta { output_index, .. }
            | ResponseEvent::ReasoningDelta { output_index, .. }
            | ResponseEvent::FunctionCallArgumentsDelta { output_index, .. }
            | ResponseEvent::FunctionCallArgumentsDone { output_index, .. }
                if !is_open(*output_index) =>
            {
                return Some(format!("{event:?} for an item that is not open"));
            }
            ResponseEvent::OutputItemDone { output_index, .. } => {
                if !is_open(*output_index) || last_done >= Some(*output_index) {
                    return Some(format!("{event:?} closes twice or out of order"));
                }
                open[*output_index as usize] = false;
                last_done = Some(*output_index);
            }
            ResponseEvent::Finished(_) => {
                if open.iter().any(|open| *open) {
                    return Some("items still open at the terminal event".to_owned());
                }
                finished = true;
            }
            _ => {}
        }
    }
    None
}
