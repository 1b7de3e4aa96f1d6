#!/usr/bin/env python3
"""Builds UI workflows in the frontend's own page, for fixtures/ui-workflows/pairs.

    scripts/build-ui-in-page.py --url http://127.0.0.1:8188 --chromium /usr/bin/chromium \
        scripts/ui-page-builds.js [NAME ...]

Needs what scripts/record-ui-pairs.py needs (it reuses its browser driver), with ComfyUI
serving the frontend whose saves are wanted (`--front-end-root`). The builds file is a
JavaScript expression: an object of builds by pair name, each

    {from: "pairs/template_default.ui.json" | null, build: async (H) => { ... }}

For each build (all of them when no NAME is given) it opens a fresh page, loads `from` (or an
empty graph) with `app.loadGraphData`, runs `build` with the helpers `H` below (the page's own
LiteGraph API and commands: `LiteGraph.createNode` + `graph.add`, `node.connect`, the
`Comfy.Graph.ConvertToSubgraph` command on a canvas selection, `subgraph.addInput(..)
.connect(..)` to promote a widget, a widget's value set with its callback), and exports the
graph as the frontend's Export does (`graphToPrompt().workflow` with `extra.ds` added,
`JSON.stringify(.., null, 2)`) to pairs/NAME.ui.json (or --out). It then loads that export in
the same page and checks that `graphToPrompt().output` is the live graph's, saying so.
Record the pairs afterwards with scripts/record-ui-pairs.py, with each frontend.
"""

import argparse
import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("record_ui_pairs", ROOT / "scripts" / "record-ui-pairs.py")
rec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rec)

BUILD = """
(async (builds, name, wf) => {
  const app = window.app, LG = window.LiteGraph;
  const opts = {showMissingNodesDialog: false, showMissingModelsDialog: false};
  const H = {
    app, LiteGraph: LG,
    async load(w) { await app.loadGraphData(w, true, true, null, opts); },
    graph() { return app.graph; },
    add(graph, type, pos) {
      const n = LG.createNode(type);
      if (!n) throw new Error('no node type ' + type);
      n.pos = pos;
      graph.add(n);
      return n;
    },
    input(node, name) {
      const i = (node.inputs || []).findIndex(s => s.name === name);
      if (i < 0) throw new Error('node ' + node.id + ' has no input ' + name);
      return i;
    },
    link(from, slot, to, name) {
      if (!from.connect(slot, to, H.input(to, name)))
        throw new Error('could not connect ' + from.id + ' to ' + to.id + '.' + name);
    },
    async convert(nodes) {
      const c = app.canvas;
      c.deselectAll();
      for (const n of nodes) c.select(n);
      await app.extensionManager.command.execute('Comfy.Graph.ConvertToSubgraph');
      const made = [...c.selectedItems];
      if (made.length !== 1 || !made[0].subgraph) throw new Error('not converted');
      return made[0];
    },
    promote(instance, name, type, inner, inputName) {
      const si = instance.subgraph.addInput(name, type);
      const slot = inner.inputs[H.input(inner, inputName)];
      if (!si.connect(slot, inner)) throw new Error('could not promote ' + inputName);
      return si;
    },
    inner(instance, pred) {
      const n = instance.subgraph.nodes.find(pred);
      if (!n) throw new Error('no such node inside ' + instance.id);
      return n;
    },
    set(node, name, value) {
      // A promoted widget by the subgraph input it stands for (1.58 names it after the
      // inner widget), else a widget by its name.
      const input = (node.inputs || []).find(i => i.name === name);
      const w = (input && input._widget) || (node.widgets || []).find(w => w.name === name);
      if (!w) throw new Error('node ' + node.id + ' has no widget ' + name + ' (' +
          (node.widgets || []).map(w => w.name).join(', ') + ')');
      w.value = value;
      if (w.callback) w.callback(value);
    },
  };
  if (wf) await H.load(wf);
  else await H.load({last_node_id: 0, last_link_id: 0, nodes: [], links: [], groups: [],
                     config: {}, extra: {}, version: 0.4});
  await builds[name].build(H);
  app.graph.setDirtyCanvas(true, true);
  const p = await app.graphToPrompt();
  if (app.ui.settings.getSettingValue('Comfy.EnableWorkflowViewRestore') !== false) {
    const {offset, scale} = app.canvas.ds;
    p.workflow.extra ??= {};
    p.workflow.extra.ds = {scale, offset: [offset[0], offset[1]]};
  }
  const ui = JSON.stringify(p.workflow, null, 2);
  const live = JSON.stringify(p.output);
  await H.load(JSON.parse(ui));
  const again = JSON.stringify((await app.graphToPrompt()).output);
  return {ui, same: live === again, live, again};
})(%s, %s, %s)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--fixtures", default=str(ROOT / "fixtures" / "ui-workflows"))
    ap.add_argument("--out", help="folder for NAME.ui.json (default: the pairs folder)")
    ap.add_argument("--prefix", default="", help="written as PREFIX + NAME")
    ap.add_argument("--port", type=int, default=9223)
    ap.add_argument("builds")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    fixtures = pathlib.Path(args.fixtures)
    out = pathlib.Path(args.out) if args.out else fixtures / "pairs"
    js = pathlib.Path(args.builds).read_text(encoding="utf-8")
    browser = rec.Browser(args.chromium, args.port)
    failed = 0
    try:
        page, _ = rec.open_app(browser, args.url.rstrip("/") + "/")
        names = args.names or page.evaluate("Object.keys(%s)" % js)
        froms = page.evaluate("Object.fromEntries(Object.entries(%s).map(([k, v]) => [k, v.from || null]))" % js)
        browser.close_page(page)
        for name in names:
            page, version = rec.open_app(browser, args.url.rstrip("/") + "/")
            try:
                wf = (fixtures / froms[name]).read_text(encoding="utf-8") if froms[name] else "null"
                r = page.evaluate(BUILD % (js, json.dumps(name), wf))
            finally:
                browser.close_page(page)
            target = out / f"{args.prefix}{name}.ui.json"
            target.write_text(r["ui"] + "\n", encoding="utf-8")
            status = "reloaded export queues the same" if r["same"] else "RELOADED EXPORT QUEUES OTHERWISE"
            if not r["same"]:
                failed += 1
                print("  live:  ", r["live"][:3000])
                print("  again: ", r["again"][:3000])
            print(f"{target.name}: built by frontend {version}; {status}")
    finally:
        browser.quit()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
