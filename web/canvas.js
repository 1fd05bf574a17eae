// A matrix drawn on one <canvas> instead of a DOM cell per number: the page's path for long
// prompts (a 1024-token head is a million scores; a million table cells freeze the browser).
// Each cell is a px × px block; hovering reports the cell under the pointer, a click selects it.
// The canvas carries its geometry as data-* (rows, cols, px) so the browser tests can read the
// colour of every cell back with getImageData and compare it with the API's numbers.

import { el, maskedRGB } from './util.js';

// Cells of at most maxSide pixels across in all (at least 1 pixel a cell), at most 14 a cell.
export function cellSize(rows, cols, maxSide = 720) {
  return Math.max(1, Math.min(14, Math.floor(maxSide / Math.max(rows, cols, 1))));
}

// rows × cols cells of px × py pixels (px across, py down); rgb(r, c) gives [r, g, b], or null
// for a masked cell (hatched grey). onHover(r, c) / onClick(r, c) get the cell under the
// pointer; onLeave when it leaves.
export function matrixCanvas({ rows, cols, rgb, px = cellSize(rows, cols), py = px, onHover, onLeave, onClick, attrs = {} }) {
  const w = cols * px, h = rows * py;
  const canvas = el('canvas', { width: w, height: h, class: 'matrix-canvas', 'data-rows': rows, 'data-cols': cols,
    'data-px': px, 'data-py': py, ...attrs });
  const g = canvas.getContext('2d');
  const img = g.createImageData(w, h);
  const data = img.data;
  for (let r = 0; r < rows; ++r) {
    for (let c = 0; c < cols; ++c) {
      const colour = rgb(r, c);
      for (let y = r * py; y < (r + 1) * py; ++y) {
        let o = 4 * (y * w + c * px);
        for (let x = c * px; x < (c + 1) * px; ++x, o += 4) {
          const [R, G, B] = colour || maskedRGB(x, y);
          data[o] = R; data[o + 1] = G; data[o + 2] = B; data[o + 3] = 255;
        }
      }
    }
  }
  g.putImageData(img, 0, 0);
  const at = (ev) => {
    // The pointer in canvas pixels (inside the border; the canvas may be drawn scaled).
    const rect = canvas.getBoundingClientRect();
    const x = ((ev.clientX - rect.left - canvas.clientLeft) * canvas.width) / canvas.clientWidth;
    const y = ((ev.clientY - rect.top - canvas.clientTop) * canvas.height) / canvas.clientHeight;
    const r = Math.floor(y / py), c = Math.floor(x / px);
    return r >= 0 && r < rows && c >= 0 && c < cols ? { r, c } : null;
  };
  let last = '';
  if (onHover) canvas.addEventListener('mousemove', (ev) => {
    const p = at(ev);
    if (!p || `${p.r},${p.c}` === last) return;
    last = `${p.r},${p.c}`;
    onHover(p.r, p.c, ev);
  });
  canvas.addEventListener('mouseleave', () => { last = ''; if (onLeave) onLeave(); });
  if (onClick) canvas.addEventListener('click', (ev) => { const p = at(ev); if (p) onClick(p.r, p.c, ev); });
  return canvas;
}
