//! Test support shared by the integration tests: the fake GPU libraries and the fake ComfyUI.
#![allow(dead_code)]

pub mod gpu;
