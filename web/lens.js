// The logit lens (the answer's `logit_lens`, docs/explain.md): the last position's residual
// stream after the embeddings and after each layer, read through the final LayerNorm and the
// head as if the model stopped there. One row per point, its top tokens with their
// probabilities; the final prediction's token is marked in every row it reaches, so the
// decision can be seen forming layer by layer.

import { $, pct, quote, el, weightColour, textColour, visible } from './util.js';
import { state, T } from './state.js';

export function renderLens() {
  const d = state.data;
  const lens = d.logit_lens || [];
  const final = d.prediction.top[0];
  const box = $('#lens');
  box.replaceChildren();
  $('#lens-final').textContent = T('lens.final', quote(final.text), final.id);
  $('#lens-final').dataset.id = String(final.id);
  const maxP = Math.max(...lens.flatMap((row) => row.top.map((c) => c.probability)), 1e-12);
  for (const row of lens) {
    const rank = row.top.findIndex((c) => c.id === final.id);
    const where = rank < 0 ? T('lens.absent', row.top.length)
      : T('lens.rank', rank + 1, pct(row.top[rank].probability));
    const tr = el('tr', { class: 'lens-row', 'data-layer': row.layer, 'data-final-rank': String(rank) },
      el('th', { text: row.layer < 0 ? T('lens.afterEmb') : T('lens.afterLayer', row.layer) }),
      el('td', { class: 'lens-where' + (rank === 0 ? ' top' : ''), text: where }));
    const cells = el('td', { class: 'lens-top' });
    row.top.forEach((c, k) => {
      const bg = weightColour(c.probability / maxP);
      cells.append(el('span', { class: 'lens-tok' + (c.id === final.id ? ' final' : ''), 'data-rank': k, 'data-id': c.id,
        'data-value': String(c.probability), title: `id ${c.id}, logit ${c.logit}`, style: `background:${bg};color:${textColour(bg)}` },
      el('span', { class: 'tok-text', text: visible(c.text) }), ' ', el('span', { class: 'lens-p', text: pct(c.probability) })));
    });
    tr.append(cells);
    box.append(tr);
  }
}
