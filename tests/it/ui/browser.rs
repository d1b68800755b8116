//! The pages in a real browser.
