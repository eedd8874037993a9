//! An event sink that keeps everything it is given.

use std::sync::{Arc, Mutex};

use noetic_core::{EventSink, FrameworkEvent, StreamEvent};

/// Keeps every event, in order. Clone it before handing it to a context to keep a handle.
#[derive(Clone, Default, Debug)]
pub struct EventLog {
    events: Arc<Mutex<Vec<StreamEvent>>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The log as a sink for `ContextOptions::event_sink`.
    pub fn sink(&self) -> Arc<dyn EventSink> {
        Arc::new(self.clone())
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<StreamEvent> {
        self.lock().clone()
    }

    /// The framework events so far.
    pub fn framework(&self) -> Vec<FrameworkEvent> {
        self.lock()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Framework(event) => Some(event.clone()),
                _ => None,
            })
            .collect()
    }

    /// The type names of the framework events so far.
    pub fn framework_types(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Framework(event) => Some(event.event_type()),
                _ => None,
            })
            .collect()
    }

    /// The wire types of the provider events so far.
    pub fn sdk_types(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Sdk(event) => Some(event.event_type().to_owned()),
                _ => None,
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<StreamEvent>> {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: StreamEvent) {
        self.lock().push(event);
    }
}
