// Subgraph instances built in the frontend's page by scripts/build-ui-in-page.py (issue 50):
// promoted widgets with non-widget inputs before, between and after them, a seed with
// control_after_generate among them, and an instance whose promoted widget is promoted again.
({
  // EmptyImage -> [ImageBlend -> ImageAddNoise -> ImageBlur -> ImageCompositeMasked] -> SaveImage,
  // the four converted to a subgraph; then its inputs, in this order: image1 (from the
  // conversion), seed (ImageAddNoise.seed, promoted), image2 (ImageBlend.image2), blend_factor,
  // blur_radius (promoted), mask (ImageCompositeMasked.mask); a second EmptyImage and a
  // SolidMask feed image2 and mask outside; the instance's widgets set to 777, 0.25 and 3.
  subgraph_interleaved_inputs: {
    from: null,
    build: async (H) => {
      const g = H.graph();
      const e1 = H.add(g, 'EmptyImage', [0, 0]);
      const e2 = H.add(g, 'EmptyImage', [0, 300]);
      const m = H.add(g, 'SolidMask', [0, 600]);
      const b = H.add(g, 'ImageBlend', [350, 0]);
      const n = H.add(g, 'ImageAddNoise', [650, 0]);
      const l = H.add(g, 'ImageBlur', [950, 0]);
      const c = H.add(g, 'ImageCompositeMasked', [1250, 0]);
      const s = H.add(g, 'SaveImage', [1600, 0]);
      H.link(e1, 0, b, 'image1');
      H.link(b, 0, n, 'image');
      H.link(n, 0, l, 'image');
      H.link(l, 0, c, 'destination');
      H.link(l, 0, c, 'source');
      H.link(c, 0, s, 'images');
      const sg = await H.convert([b, n, l, c]);
      const [B, N, L, C] = ['ImageBlend', 'ImageAddNoise', 'ImageBlur', 'ImageCompositeMasked']
        .map(t => H.inner(sg, x => x.type === t));
      H.promote(sg, 'seed', 'INT', N, 'seed');
      H.promote(sg, 'image2', 'IMAGE', B, 'image2');
      H.promote(sg, 'blend_factor', 'FLOAT', B, 'blend_factor');
      H.promote(sg, 'blur_radius', 'INT', L, 'blur_radius');
      H.promote(sg, 'mask', 'MASK', C, 'mask');
      H.link(e2, 0, sg, 'image2');
      H.link(m, 0, sg, 'mask');
      H.set(sg, 'seed', 777);
      H.set(sg, 'blend_factor', 0.25);
      H.set(sg, 'blur_radius', 3);
    },
  },
  // The same inner chain converted to a subgraph with seed and blur_radius promoted (and
  // blend_factor), then that instance and the SaveImage converted again; in the outer
  // subgraph, in this order: image1 (from the conversion), noise_seed (the inner instance's
  // promoted seed, promoted again), image2 (the inner instance's IMAGE input), blur (its
  // promoted blur_radius), mask; outside, EmptyImage and SolidMask feed image2 and mask; the
  // outer instance's widgets set to 4321 and 5, the inner one's to 777, 0.25 and 3.
  subgraph_nested_promoted_again: {
    from: null,
    build: async (H) => {
      const g = H.graph();
      const e1 = H.add(g, 'EmptyImage', [0, 0]);
      const e2 = H.add(g, 'EmptyImage', [0, 300]);
      const m = H.add(g, 'SolidMask', [0, 600]);
      const b = H.add(g, 'ImageBlend', [350, 0]);
      const n = H.add(g, 'ImageAddNoise', [650, 0]);
      const l = H.add(g, 'ImageBlur', [950, 0]);
      const c = H.add(g, 'ImageCompositeMasked', [1250, 0]);
      const s = H.add(g, 'SaveImage', [1600, 0]);
      H.link(e1, 0, b, 'image1');
      H.link(b, 0, n, 'image');
      H.link(n, 0, l, 'image');
      H.link(l, 0, c, 'destination');
      H.link(l, 0, c, 'source');
      H.link(c, 0, s, 'images');
      const inner = await H.convert([b, n, l, c]);
      const [B, N, L, C] = ['ImageBlend', 'ImageAddNoise', 'ImageBlur', 'ImageCompositeMasked']
        .map(t => H.inner(inner, x => x.type === t));
      H.promote(inner, 'seed', 'INT', N, 'seed');
      H.promote(inner, 'image2', 'IMAGE', B, 'image2');
      H.promote(inner, 'blend_factor', 'FLOAT', B, 'blend_factor');
      H.promote(inner, 'blur_radius', 'INT', L, 'blur_radius');
      H.promote(inner, 'mask', 'MASK', C, 'mask');
      H.set(inner, 'seed', 777);
      H.set(inner, 'blend_factor', 0.25);
      H.set(inner, 'blur_radius', 3);
      const outer = await H.convert([inner, s]);
      const I = H.inner(outer, x => !!x.subgraph);
      H.promote(outer, 'noise_seed', 'INT', I, 'seed');
      H.promote(outer, 'image2', 'IMAGE', I, 'image2');
      H.promote(outer, 'blur', 'INT', I, 'blur_radius');
      H.promote(outer, 'mask', 'MASK', I, 'mask');
      H.link(e2, 0, outer, 'image2');
      H.link(m, 0, outer, 'mask');
      H.set(outer, 'noise_seed', 4321);
      H.set(outer, 'blur', 5);
    },
  },
  // templates/default.json; Empty Latent Image, KSampler and VAE Decode converted to a
  // subgraph (its inputs: model, positive, negative, vae); KSampler's seed, EmptyLatentImage's
  // width and KSampler's cfg promoted, in that order, and set to 12345, 640 and 6.5.
  subgraph_default_promoted: {
    from: 'pairs/template_default.ui.json',
    build: async (H) => {
      const g = H.graph();
      const sg = await H.convert([g.getNodeById(5), g.getNodeById(3), g.getNodeById(8)]);
      const K = H.inner(sg, x => x.type === 'KSampler');
      const E = H.inner(sg, x => x.type === 'EmptyLatentImage');
      H.promote(sg, 'seed', 'INT', K, 'seed');
      H.promote(sg, 'width', 'INT', E, 'width');
      H.promote(sg, 'cfg', 'FLOAT', K, 'cfg');
      H.set(sg, 'seed', 12345);
      H.set(sg, 'width', 640);
      H.set(sg, 'cfg', 6.5);
    },
  },
})
