//! A container's logs: the last lines, then new ones as they come (the
//! page's script follows `data-log-stream`; every line is text, never
//! markup).

use maud::{Markup, html};

pub fn main(ns: &str, pod: &str, container: &str, lines: &Result<String, String>) -> Markup {
    let stream = super::logs_href(ns, pod, container).replacen('?', "/stream?", 1);
    html! {
        h1 { "Logs of " (ns) "/" (pod) " · " (container) }
        @match lines {
            Ok(text) => pre #log data-log=(container) data-log-stream=(stream) { (text) },
            Err(why) => p.error role="alert" data-log-error="" { (why) },
        }
    }
}
