#!/usr/bin/env python3
"""Makes UI workflows as the frontend's own page saves them, for fixtures/ui-workflows/pairs.

    scripts/save-ui-in-page.py --url http://127.0.0.1:8188 --chromium /usr/bin/chromium SPEC.json

Needs what scripts/record-ui-pairs.py needs (it reuses its browser driver), with ComfyUI
serving the frontend whose saves are wanted (`--front-end-root`). SPEC.json is a list of

    {"name": "page_...", "from": "pairs/NAME.ui.json",
     "edits": [{"node": 57, "widgets": {"steps": 9}, "mode": 4}]}

For each entry it loads `from` in a fresh page, sets the widgets of each edited node (as a
user would: the widget's value and its callback) and its mode, and writes
`app.graph.serialize()` (what the page's Save writes) to pairs/NAME.ui.json. Record the pairs
afterwards with scripts/record-ui-pairs.py, with each frontend.
"""

import argparse
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("record_ui_pairs", ROOT / "scripts" / "record-ui-pairs.py")
rec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rec)

SAVE = """
(async (wf, edits) => {
  await window.app.loadGraphData(wf, true, true, null,
      {showMissingNodesDialog: false, showMissingModelsDialog: false});
  for (const e of edits) {
    const node = window.app.graph.getNodeById(e.node);
    if (!node) throw new Error('no node ' + e.node);
    for (const [name, value] of Object.entries(e.widgets || {})) {
      const w = (node.widgets || []).find(w => w.name === name);
      if (!w) throw new Error('node ' + e.node + ' has no widget ' + name);
      w.value = value;
      if (w.callback) w.callback(value);
    }
    if (e.mode !== undefined) node.mode = e.mode;
  }
  window.app.graph.setDirtyCanvas(true, true);
  return JSON.stringify(window.app.graph.serialize(), null, 2);
})(%s, %s)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--fixtures", default=str(ROOT / "fixtures" / "ui-workflows"))
    ap.add_argument("--port", type=int, default=9223)
    ap.add_argument("spec")
    args = ap.parse_args()
    fixtures = pathlib.Path(args.fixtures)
    entries = json.loads(pathlib.Path(args.spec).read_text(encoding="utf-8"))
    browser = rec.Browser(args.chromium, args.port)
    try:
        for e in entries:
            page, version = rec.open_app(browser, args.url.rstrip("/") + "/")
            try:
                wf = (fixtures / e["from"]).read_text(encoding="utf-8")
                saved = page.evaluate(SAVE % (wf, json.dumps(e["edits"])))
            finally:
                browser.close_page(page)
            (fixtures / "pairs" / f"{e['name']}.ui.json").write_text(saved + "\n", encoding="utf-8")
            print(f"{e['name']}: saved by frontend {version}")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
