//! The conversion against the frontend's own: every recorded pair of
//! `fixtures/ui-workflows/` (a UI workflow and what ComfyUI's frontend queued for it) converts
//! to the same prompt (node ids, class types and inputs; `_meta` and key order aside).

use super::*;
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/ui-workflows")
}

fn read(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn defs() -> NodeDefs {
    NodeDefs::parse(&read(fixtures().join("object_info.json"))).unwrap()
}

/// The prompt without `_meta`, for comparing.
fn bare(prompt: &Map<String, Value>) -> Value {
    Value::Object(
        prompt
            .iter()
            .map(|(id, e)| {
                let mut e = e.clone();
                if let Some(o) = e.as_object_mut() {
                    o.remove("_meta");
                }
                (id.clone(), e)
            })
            .collect(),
    )
}

/// Converts the pair `name` and compares it with frontend 1.27.10's.
fn pair(name: &str) {
    pair_of(name, "pairs", Frontend::V1_27);
}

/// Converts the pair `name` by `frontend`'s rules and compares it with that frontend's
/// recording in `dir`.
fn pair_of(name: &str, dir: &str, frontend: Frontend) {
    let ui = read(fixtures().join(format!("pairs/{name}.ui.json")));
    let expected = read(fixtures().join(format!("{dir}/{name}.api.json")));
    let (got, _) =
        convert_for(&ui, &defs(), frontend).unwrap_or_else(|r| panic!("{name}: refused: {r}"));
    let expected = bare(expected.as_object().unwrap());
    let got = bare(&got);
    if got != expected {
        let e = expected.as_object().unwrap();
        let g = got.as_object().unwrap();
        let mut diff = Vec::new();
        for id in e
            .keys()
            .chain(g.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            if e.get(id) != g.get(id) {
                diff.push(format!(
                    "node {id}:\n  frontend: {}\n  here:     {}",
                    e.get(id).map(Value::to_string).unwrap_or("-".into()),
                    g.get(id).map(Value::to_string).unwrap_or("-".into())
                ));
            }
        }
        panic!("{name}: differs from the frontend's\n{}", diff.join("\n"));
    }
}

/// The features of each pair, as `pairs.json` tags them.
fn manifest() -> Vec<(String, Vec<String>)> {
    let list = read(fixtures().join("pairs.json"));
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let features = p["features"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (p["name"].as_str().unwrap().to_string(), features)
        })
        .collect()
}

/// One test per recorded pair.
macro_rules! pairs {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            #[allow(non_snake_case)]
            fn $name() {
                pair(stringify!($name));
            }
        )*
        const PAIRS: &[&str] = &[$(stringify!($name)),*];
    };
}

pairs!(
    template_default,
    template_image2image,
    template_inpaint_example,
    template_lora,
    template_hunyuan_video_text_to_video,
    template_hidream_e1_full,
    template_hidream_e1_1,
    template_sdxl_simple_example,
    template_sdxl_refiner_prompt_example,
    template_flux_redux_model_example,
    template_image_qwen_image_instantx_controlnet,
    template_flux1_dev_uso_reference_image_gen,
    template_image_qwen_image_edit_2509,
    template_area_composition,
    template_hiresfix_latent_workflow,
    template_audio_stable_audio_example,
    template_esrgan_example,
    template_video_wan_vace_flf2v,
    template_video_wan2_2_14B_s2v,
    frontend_legacy_group_node,
    frontend_group_ksampler_external_latent,
    built_empty_invert_save,
    built_load_image_invert,
    built_default_vaedecode_muted,
    built_default_latent_muted,
    built_chain_bypassed,
    built_default_vaedecode_bypassed,
    built_default_lora_bypassed,
    built_default_reroute_nodes,
    built_reroute_fanout,
    built_native_reroute_single,
    built_native_reroute_chain,
    built_native_reroute_executable,
    built_primitive_seed,
    built_primitive_fanout,
    built_primitive_text_dynamic,
    built_widget_input_nodes,
    built_default_notes,
    built_subgraph_basic,
    built_subgraph_nested,
    built_subgraph_promoted_seed,
    built_subgraph_modes,
    built_subgraph_bypassed_node,
    built_subgraph_widget_link,
    built_group_node_default,
    built_group_node_executable,
    built_dynamic_prompts,
    built_dynamic_prompts_sdxl,
    built_seed_controls,
    built_muted_bypassed_subgraph_template,
    built_subgraph_interleaved_inputs,
    built_subgraph_nested_promoted_again,
    built_subgraph_default_promoted,
    cur_flux1_dev_uso_reference_image_gen,
    cur_flux1_krea_dev,
    cur_flux_canny_model_example,
    cur_flux_depth_lora_example,
    cur_flux_dev_checkpoint_example,
    cur_flux_dev_full_text_to_image,
    cur_flux_redux_model_example,
    cur_flux_schnell,
    cur_hidream_e1_1,
    cur_hidream_e1_full,
    cur_hidream_i1_dev,
    cur_hidream_i1_fast,
    cur_hidream_i1_full,
    cur_hunyuan_video_text_to_video,
    cur_image_anima_preview,
    cur_image_kandinsky5_t2i,
    cur_image_lotus_depth_v1_1,
    cur_image_omnigen2_t2i,
    cur_image_ovis_text_to_image,
    cur_image_qwen_image_2512_with_2steps_lora,
    cur_image_sdxl_simple,
    cur_image_z_image_turbo,
    cur_image_z_image_turbo_int8,
    cur_sd3_5_large_blur,
    cur_sd3_5_large_canny_controlnet_example,
    cur_sd3_5_large_depth,
    cur_sd3_5_simple_example,
    cur_sdxl_refiner_prompt_example,
    cur_sdxl_simple_example,
    cur_template_qwen_image_illustration_lora,
    cur_templates_image_to_real,
    cur_text_to_video_wan,
    cur_video_wan2_2_14B_s2v,
    cur_video_wan_vace_14B_t2v,
    cur_3d_hunyuan3d_v2_1,
    cur_3d_hunyuan3d_image_to_model,
    cur_flux_fill_inpaint_example,
    cur_flux_kontext_dev_basic,
    cur_image_qwen_image_edit_2511_lora_inflation,
    cur_image_chroma1_radiance_text_to_image,
    cur_image_flux_1_fill_dev_OneReward,
    cur_image_netayume_lumina_t2i,
    cur_image_newbieimage_exp0_1_t2i,
    cur_image_qwen_image_edit_2509_relight,
    cur_image_qwen_image_instantx_controlnet,
    cur_image_qwen_image_instantx_inpainting_controlnet,
    cur_image_z_image_turbo_fun_union_controlnet,
    cur_template_sugar_coated_gummy_style_qwen,
    cur_templates_1_click_multiple_scene_angles_v1_0,
    cur_templates_photo_to_product_vid,
    page_ovis_promoted_edited,
    page_z_image_promoted_edited,
    page_krea_promoted_edited,
    page_depth_lora_promoted_edited,
    page_krea_instance_bypassed,
    page142_z_image_promoted_edited,
    page142_depth_lora_promoted_edited,
    page142_krea_instance_bypassed,
    page142_subgraph_interleaved_inputs,
    page142_subgraph_nested_promoted_again,
    page142_subgraph_default_promoted,
    page158_subgraph_interleaved_inputs,
);

#[test]
fn every_pair_of_the_manifest_has_its_test_and_every_feature_is_covered() {
    let names: Vec<String> = manifest().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names, PAIRS,
        "pairs.json and the tests list different pairs"
    );
    let mut count: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, features) in manifest() {
        for f in features {
            *count.entry(f).or_default() += 1;
        }
    }
    for feature in [
        "widgets",
        "seed_control",
        "links",
        "reroute_node",
        "native_reroute",
        "primitive",
        "widget_input",
        "muted",
        "bypassed",
        "note",
        "subgraph",
        "group_node",
        "image_upload",
        "dynamic_prompts",
    ] {
        assert!(
            count.get(feature).copied().unwrap_or(0) >= 3,
            "{feature}: {count:?}"
        );
    }
    assert!(names.len() >= 30);
}

#[test]
fn dynamic_prompts_as_the_frontend_processes_them() {
    assert_eq!(dynamic_prompt("a {red} cat // note").unwrap(), "a red cat ");
    assert_eq!(dynamic_prompt("{a|a} /* x */b").unwrap(), "a b");
    assert_eq!(
        dynamic_prompt(r"\{kept\} and \| too").unwrap(),
        "{kept} and | too"
    );
    assert_eq!(dynamic_prompt("https://example.com/x").unwrap(), "https:");
    let err = dynamic_prompt("a {red|blue} cat").unwrap_err();
    assert!(err.contains("at random"), "{err}");
}

/// Saved by another version of a node: values mapped to this ComfyUI's widgets by position
/// from the start, as frontends 1.27 and 1.58 both do, with a warning naming the node.
#[test]
fn a_widget_count_unlike_the_definition_maps_by_position_with_a_warning() {
    let ui = read(fixtures().join("pairs/template_default.ui.json"));
    let want = read(fixtures().join("pairs/template_default.api.json"));
    let ksampler_id = want
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, n)| n["class_type"] == "KSampler")
        .map(|(id, _)| id.clone())
        .unwrap();
    let with = |f: &dyn Fn(&mut Vec<Value>)| {
        let mut ui = ui.clone();
        let k = ui["nodes"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|n| n["type"] == "KSampler")
            .unwrap();
        f(k["widgets_values"].as_array_mut().unwrap());
        convert_with_warnings(&ui, &defs()).unwrap()
    };
    // One value fewer (denoise, last): it takes its default, 1.0.
    let (prompt, warnings) = with(&|v| {
        v.pop();
    });
    assert_eq!(prompt[&ksampler_id]["inputs"]["denoise"], json!(1.0));
    assert_eq!(
        prompt[&ksampler_id]["inputs"]["steps"],
        want[&ksampler_id]["inputs"]["steps"]
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(
            "(KSampler): 6 saved widget values where this ComfyUI's definition makes 7 widgets"
        ) && warnings[0]
            .ends_with("mapped by position as the frontend does, denoise at its default"),
        "{warnings:?}"
    );
    // One more (a widget a newer version added): dropped, the rest as saved.
    let (prompt, warnings) = with(&|v| v.push(json!("extra")));
    for (id, node) in want.as_object().unwrap() {
        assert_eq!(prompt[id]["inputs"], node["inputs"], "node {id}");
    }
    assert!(warnings[0].ends_with("the last 1 dropped"), "{warnings:?}");
    // As saved: no warning.
    let (_, warnings) = with(&|_| {});
    assert!(warnings.is_empty());
}

#[test]
fn malformed_or_exploding_graphs_are_refused_not_panicked_on() {
    let d = defs();
    // A group node whose inside holds something that is not a node.
    for bad in [
        json!({"nodes": [], "links": [], "extra": {"groupNodes": {"g": {"nodes": [1]}}}}),
        json!({"nodes": [], "links": [], "extra": {"groupNodes": {"g": {"nodes": [{"type": "X", "inputs": [0]}]}}}}),
    ] {
        let err = convert(&bad, &d).unwrap_err();
        assert!(err.reason.contains("is not a node"), "{err}");
    }
    // Definitions that each use the next twice: 2^20 uses, refused early.
    let mut subgraphs = Vec::new();
    for i in 0..20 {
        let inner: Vec<Value> = (1..=2)
            .map(|n| json!({"id": n, "type": format!("sg{}", i + 1), "mode": 0}))
            .collect();
        subgraphs.push(json!({"id": format!("sg{i}"), "nodes": inner, "links": []}));
    }
    subgraphs.push(json!({"id": "sg20", "nodes": [], "links": []}));
    let doc = json!({
        "nodes": [{"id": 1, "type": "sg0", "mode": 0}],
        "links": [],
        "definitions": {"subgraphs": subgraphs}
    });
    let err = convert(&doc, &d).unwrap_err();
    assert!(err.reason.contains("more than 10000"), "{err}");
}

#[test]
fn braces_nested_without_end_are_refused() {
    let err = dynamic_prompt(&"{".repeat(200_000)).unwrap_err();
    assert!(err.contains("more than 64 deep"), "{err}");
}

/// The names of the pairs recorded in `dir` (its `NAME.api.json` files), and those of them
/// that the `frontend` rules do not convert to the same prompt.
fn differing_pairs(dir: &str, frontend: Frontend) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join(dir))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".api.json")
                .map(String::from)
        })
        .collect();
    names.sort();
    let differ = names
        .iter()
        .filter(|name| std::panic::catch_unwind(|| pair_of(name, dir, frontend)).is_err())
        .cloned()
        .collect();
    (names, differ)
}

/// Every pair recorded with frontend 1.58.1 (`pairs-1.58`, against the same ComfyUI 0.3.64)
/// converts to the same prompt by the 1.58 rules, but for the pairs listed in `GAPS_1_58`
/// (what the 1.58 rules do not do yet), which must differ: the list is exact.
#[test]
fn the_pairs_recorded_with_frontend_1_58_convert_by_its_rules() {
    let (names, differ) = differing_pairs("pairs-1.58", Frontend::V1_58);
    assert!(names.len() >= 92, "{}", names.len());
    let gaps: Vec<String> = GAPS_1_58.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(differ, gaps, "pairs that differ by the 1.58 rules");
}

/// Every pair recorded with frontend 1.42.10 (`pairs-1.42`) converts to the same prompt by
/// the 1.42 rules, but for those listed in `GAPS_1_42`, which must differ: the list is exact.
/// (By the 1.58 rules fifteen of them differ: `pairs-1.42/DIFFERENCES.md`.)
#[test]
fn the_pairs_recorded_with_frontend_1_42_convert_by_its_rules() {
    let (names, differ) = differing_pairs("pairs-1.42", Frontend::V1_42);
    // The two s2v templates are not there: 1.42.10 gave them different prompts in two
    // fresh pages.
    assert!(names.len() >= 90, "{}", names.len());
    let gaps: Vec<String> = GAPS_1_42.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(differ, gaps, "pairs that differ by the 1.42 rules");
    let (_, by_1_58) = differing_pairs("pairs-1.42", Frontend::V1_58);
    assert_eq!(by_1_58.len(), 15, "{by_1_58:?}");
}

/// Pairs frontend 1.42.10 converts otherwise than the 1.42 rules here, and why.
const GAPS_1_42: &[(&str, &str)] = &[
    (
        "built_group_node_default",
        "1.42 fills a legacy group node's inner nodes from shifted values and links (a latent link sent as steps): not modelled",
    ),
    (
        "frontend_group_ksampler_external_latent",
        "1.42 fills a legacy group node's inner nodes from shifted values and links: not modelled",
    ),
    (
        "frontend_legacy_group_node",
        "1.42 fills a legacy group node's inner nodes from shifted values (the control value as steps): not modelled",
    ),
];

/// Pairs frontend 1.58.1 converts otherwise than the 1.58 rules here, and why.
const GAPS_1_58: &[(&str, &str)] = &[];

/// Each rule changes at its own version: the pairs that show a change, recorded with the last
/// release of the minor version before it and of the one it came in
/// (`fixtures/ui-workflows/versions/VERSION/NAME.api.json`), convert as that version queues
/// them.
#[test]
fn each_rule_changes_at_the_version_it_was_recorded_to() {
    let dir = fixtures().join("versions");
    let mut checked = 0;
    for version in std::fs::read_dir(&dir).unwrap().flatten() {
        let v = version.file_name().to_string_lossy().into_owned();
        for file in std::fs::read_dir(version.path()).unwrap().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            let name = name.strip_suffix(".api.json").unwrap().to_string();
            pair_of(&name, &format!("versions/{v}"), Frontend::of_version(&v));
            checked += 1;
        }
    }
    assert_eq!(checked, 37);
}

#[test]
fn the_served_frontend_decides_and_a_difference_is_said() {
    use crate::workflow::Workflow;
    assert_eq!(Frontend::of_version("1.27.10"), Frontend::V1_27);
    assert_eq!(Frontend::of_version("1.58.1"), Frontend::V1_58);
    assert_eq!(Frontend::of_version("1.42.10"), Frontend::V1_42);
    assert_eq!(
        Frontend::of_version("1.42.5-rc1"),
        Frontend::of_version("1.42.5")
    );
    assert!(Frontend::recorded("1.42.5") && Frontend::recorded("1.27.1"));
    assert!(!Frontend::recorded("1.42.4") && !Frontend::recorded("1.43.0"));
    let mut ui = read(fixtures().join("pairs/template_video_wan2_2_14B_s2v.ui.json"));
    let text = |ui: &Value| Workflow::parse(&ui.to_string()).unwrap();
    // Served 1.27.10, saved by 1.58.1: converted as 1.27 queues it, the differing nodes named.
    ui["extra"]["frontendVersion"] = json!("1.58.1");
    let w = text(&ui).converted(&defs(), Some("1.27.10")).unwrap();
    assert!(w.prompt.contains_key("85:76"));
    assert_eq!(w.warnings.len(), 1, "{:?}", w.warnings);
    assert!(
        w.warnings[0].starts_with("saved by frontend 1.58.1, newer than the 1.27.10 this ComfyUI serves: converted as 1.27.10 queues it; newer frontends queue nodes ")
            && w.warnings[0].contains("85:182"),
        "{:?}",
        w.warnings
    );
    // Served 1.58.1: its own ids, nothing to say.
    let w = text(&ui).converted(&defs(), Some("1.58.1")).unwrap();
    assert!(
        w.prompt.contains_key("85:182") && w.warnings.is_empty(),
        "{:?}",
        w.warnings
    );
    // Served 1.40.2, saved by 1.58.1: the newer frontend's nodes named.
    let w = text(&ui).converted(&defs(), Some("1.40.2")).unwrap();
    assert!(
        w.warnings[0]
            .starts_with("saved by frontend 1.58.1, newer than the 1.40.2 this ComfyUI serves"),
        "{:?}",
        w.warnings
    );
    // A version between those recorded, the file saved by an older one: said too.
    ui["extra"]["frontendVersion"] = json!("1.27.10");
    let w = text(&ui).converted(&defs(), Some("1.40.2")).unwrap();
    assert!(
        w.warnings[0].starts_with("this ComfyUI serves frontend 1.40.2, whose rules were measured on the workflows that tell them apart but not recorded with all of them (1.27.10, 1.42.10 and 1.58.1 were): converted by its rules; by the 1.58 rules"),
        "{:?}",
        w.warnings
    );
    // Saved by a newer line (1.41.21) than the one served (1.40.10): compared with what the
    // saving line queues (its nodes' own values for an instance without `proxyWidgets`),
    // where the current line's rules would queue the same as 1.40's.
    let mut page = read(fixtures().join("pairs/page_ovis_promoted_edited.ui.json"));
    page["extra"]["frontendVersion"] = json!("1.41.21");
    let w = text(&page).converted(&defs(), Some("1.40.10")).unwrap();
    assert_eq!(w.warnings.len(), 1, "{:?}", w.warnings);
    assert!(
        w.warnings[0].starts_with("saved by frontend 1.41.21, newer than the 1.40.10"),
        "{:?}",
        w.warnings
    );
    // A current template with promoted widgets, as saved (by 1.41.3), served 1.27.10: the
    // KSampler 1.27 fills from the wrong saved values is named.
    let ovis = read(fixtures().join("pairs/cur_image_ovis_text_to_image.ui.json"));
    let w = text(&ovis).converted(&defs(), Some("1.27.10")).unwrap();
    assert_eq!(w.prompt["57:44"]["inputs"]["cfg"], json!(20));
    assert!(
        w.warnings.len() == 1
            && w.warnings[0].starts_with("saved by frontend 1.41.3, newer than the 1.27.10")
            && w.warnings[0].contains("57:44"),
        "{:?}",
        w.warnings
    );
    // A workflow both convert alike: nothing to say.
    let plain = read(fixtures().join("pairs/template_default.ui.json"));
    assert!(
        text(&plain)
            .converted(&defs(), None)
            .unwrap()
            .warnings
            .is_empty()
    );
}

/// Issue 50: an instance saved with only some of its inputs (IMAGE ones and one FLOAT widget
/// input of ten) has its values mapped to the subgraph inputs that feed a widget, in the
/// subgraph's order, not to the inputs it was saved with; a value of the wrong kind is said;
/// values beyond one per such input are dropped and said, too few are refused but where the
/// line's widgets keep what they were made with.
#[test]
fn an_instance_saved_with_some_inputs_takes_its_values_in_the_subgraphs_order() {
    let ui = read(fixtures().join("pairs/cur_image_qwen_image_edit_2511_lora_inflation.ui.json"));
    fn instance(ui: &mut Value) -> &mut Value {
        ui["nodes"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|n| n["id"] == 89)
            .unwrap()
    }
    for frontend in [Frontend::V1_27, Frontend::V1_42, Frontend::V1_58] {
        let (prompt, warnings) = convert_for(&ui, &defs(), frontend).unwrap();
        assert_eq!(prompt["89:90"]["inputs"]["strength_model"], json!(1));
        assert_eq!(
            prompt["89:68"]["inputs"]["prompt"],
            json!("inflate the man")
        );
        // (CFGNorm was saved by a newer version of the node: said, and nothing else.)
        assert!(
            warnings.len() == 1 && warnings[0].starts_with("node 64 (CFGNorm)"),
            "{warnings:?}"
        );
    }
    // Values unlike the inner nodes' own: each lands on its own input.
    let mut edited = ui.clone();
    instance(&mut edited)["widgets_values"] = json!([
        "a hat",
        "other.safetensors",
        0.25,
        7,
        "u.safetensors",
        "c.safetensors",
        "v.safetensors"
    ]);
    let (prompt, _) = convert_for(&edited, &defs(), Frontend::V1_58).unwrap();
    assert_eq!(prompt["89:68"]["inputs"]["prompt"], json!("a hat"));
    assert_eq!(
        prompt["89:90"]["inputs"]["lora_name"],
        json!("other.safetensors")
    );
    assert_eq!(prompt["89:90"]["inputs"]["strength_model"], json!(0.25));
    assert_eq!(prompt["89:65"]["inputs"]["seed"], json!(7));
    assert_eq!(
        prompt["89:10"]["inputs"]["vae_name"],
        json!("v.safetensors")
    );
    // Text for the FLOAT: sent as saved, with a warning naming the node and input.
    let mut wrong = edited.clone();
    instance(&mut wrong)["widgets_values"][2] = json!("strong");
    let (prompt, warnings) = convert_for(&wrong, &defs(), Frontend::V1_58).unwrap();
    assert_eq!(prompt["89:90"]["inputs"]["strength_model"], json!("strong"));
    assert!(
        warnings.len() == 2
            && warnings[1].contains("(LoraLoaderModelOnly): strength_model is sent \"strong\"")
            && warnings[1].contains("not the FLOAT"),
        "{warnings:?}"
    );
    // One value too many: given in order as every line gives a node's, the last dropped, said.
    let mut extra = edited.clone();
    instance(&mut extra)["widgets_values"]
        .as_array_mut()
        .unwrap()
        .push(json!("x"));
    for frontend in [Frontend::V1_27, Frontend::V1_58] {
        let (prompt, warnings) = convert_for(&extra, &defs(), frontend).unwrap();
        assert_eq!(prompt["89:65"]["inputs"]["seed"], json!(7));
        assert!(
            warnings[0].starts_with("node 89")
                && warnings[0].contains("8 saved widget values for the 7")
                && warnings[0].contains("the last 1 dropped"),
            "{warnings:?}"
        );
    }
    // One value too few: up to 1.35.2 the last widget keeps the value it was made with, a
    // copy of the inner node's; later, which input goes without cannot be told.
    let mut short = edited.clone();
    instance(&mut short)["widgets_values"]
        .as_array_mut()
        .unwrap()
        .pop();
    let (prompt, _) = convert_for(&short, &defs(), Frontend::V1_27).unwrap();
    assert_eq!(prompt["89:65"]["inputs"]["seed"], json!(7));
    assert_eq!(
        prompt["89:10"]["inputs"]["vae_name"],
        json!("qwen_image_vae.safetensors")
    );
    let err = convert_for(&short, &defs(), Frontend::V1_58).unwrap_err();
    assert!(
        err.node.starts_with("node 89") && err.reason.contains("saved 6 widget values for the 7"),
        "{err}"
    );
}

/// Issue 50: a subgraph with two inputs named `seed` (one linked to nothing inside). Up to
/// 1.41.19 and 1.42.4 an instance's input stands for the first input of its name, so the
/// second makes no widget and the third saved value is dropped (said); from 1.41.20, 1.42.5
/// and 1.43 each stands for its own. A link into an input of that name cannot be placed.
#[test]
fn two_subgraph_inputs_of_one_name_follow_each_lines_matching() {
    let ui = read(fixtures().join("pairs/page158_subgraph_interleaved_inputs.ui.json"));
    let first = |v: &str| Frontend::of_version(v).matches_inputs_by_first_name();
    for (v, by_first_name) in [
        ("1.27.10", true),
        ("1.40.10", true),
        ("1.41.19", true),
        ("1.41.20", false),
        ("1.42.4", true),
        ("1.42.5", false),
        ("1.43.0", false),
        ("1.58.1", false),
    ] {
        assert_eq!(first(v), by_first_name, "{v}");
    }
    let (prompt, warnings) = convert_for(&ui, &defs(), Frontend::V1_27).unwrap();
    assert_eq!(prompt["9:4"]["inputs"]["blend_factor"], json!(777));
    assert_eq!(prompt["9:5"]["inputs"]["seed"], json!(0));
    assert!(
        warnings.len() == 1
            && warnings[0].starts_with("node 9 ")
            && warnings[0].contains("3 saved widget values for the 2")
            && warnings[0].contains("two subgraph inputs of one name"),
        "{warnings:?}"
    );
    let (prompt, warnings) = convert_for(&ui, &defs(), Frontend::V1_58).unwrap();
    assert_eq!(prompt["9:5"]["inputs"]["seed"], json!(777));
    assert!(warnings.is_empty(), "{warnings:?}");
    // The instance's `seed` linked from outside: refused on every line, naming the instance.
    let mut linked = ui.clone();
    let nodes = linked["nodes"].as_array_mut().unwrap();
    let instance = nodes.iter_mut().find(|n| n["id"] == 9).unwrap();
    instance["inputs"][1]["link"] = json!(99);
    linked["links"]
        .as_array_mut()
        .unwrap()
        .push(json!([99, 3, 0, 9, 1, "INT"]));
    for frontend in [Frontend::V1_27, Frontend::V1_42, Frontend::V1_58] {
        let err = convert_for(&linked, &defs(), frontend).unwrap_err();
        assert!(
            err.node.starts_with("node 9") && err.reason.contains("2 inputs named seed"),
            "{err}"
        );
    }
}
