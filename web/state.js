// The page's state, shared by its modules (app.js owns the requests and the controls; the view
// modules read it and draw), and T(): a text in the page's language (web/i18n.js).

import { text } from './i18n.js';

export const state = {
  lang: 'en',
  model: null,
  status: null,      // [text key, ...args] of the status line, redrawn when the language changes
  silence: new Set(),
  selected: { layer: 0, head: 0 },
  matrix: 'weights',
  data: null,        // the last explain answer with matrices for the grid (or summary only)
  detail: null,      // the selected head's matrices when `data` has none
  pending: 0,
  query: null,       // the query token the softmax panel and the Q/K/V strips take (default: the last)
  tokensCount: 0,    // tokens of the last answer (a new length resets the query to the last)
  hover: null,       // the heatmap cell last hovered: {q, k}
  sm: { preset: 'lot', rows: [], tau: '1', model: null, info: null },  // the softmax panel
  step: 0,           // the generation step shown (steps view)
};

// The text for key in the page's language.
export const T = (key, ...args) => text(state.lang, key, ...args);

// Beyond this many tokens the heatmap and the Q/K/V strips are drawn on a <canvas> instead of
// one DOM cell per number. ?canvas=N in the URL sets it (the browser tests use the tiny model's
// 48-token context).
const canvasParam = Number(new URLSearchParams(typeof location === 'undefined' ? '' : location.search).get('canvas'));
export const CANVAS_ABOVE = Number.isInteger(canvasParam) && canvasParam > 0 ? canvasParam : 64;

export function notation() { return document.querySelector('input[name=notation]:checked').value; }

// The selected head's matrices of an answer (paper layout), or undefined.
export function headData(data, layer, head) {
  const L = (data.layers || []).find((l) => l.layer === layer);
  return L ? (L.heads || []).find((h) => h.head === head) : undefined;
}
// The selected head's matrices: from the full answer, or from the per-head one (or undefined
// while it loads).
export function selectedHead() {
  const { layer, head } = state.selected;
  return (state.data && headData(state.data, layer, head)) || (state.detail && headData(state.detail, layer, head));
}
