// Every explanation text of the explorer page, in English and in Korean (한국어). Pure data and
// one lookup, no DOM: the browser tests import this file too and check both languages have the
// same keys. A value is a string (HTML for the static texts, set as innerHTML; they are ours,
// never user input) or a function of the numbers it names. Numbers are formatted by the caller
// (app.js fmt), so both languages show identical digits.
//
// Korean vocabulary follows the seed post ("어텐션이 조모임이라면"): 조모임 (the meeting),
// 조원 (a member), 질문/쿼리 (query), 키 (key), 값 (value), 점수 (score; the post's
// 찰떡궁합점수), 가중치 (weight), 소프트맥스, 표기법, 행/열 (rows/columns).

export const LANGS = ['en', 'ko'];

export const TEXTS = {
  en: {
    'doc.title': 'jomoim — the group project, live',
    'header.sub': '조모임 — attention as a group project',
    'header.loading': 'loading the model…',
    'lang.legend': 'Language',
    'controls.prompt': 'Prompt',
    'controls.compare': 'compare with',
    'controls.notation': 'Notation',
    'controls.paper': 'paper (rows)',
    'controls.3b1b': '3Blue1Brown (columns)',
    'controls.swap': 'swap Q and K',
    'controls.seed': 'The seed\'s example',
    'controls.run': 'Explain',
    'controls.generation': 'Generate',
    'controls.generate': 'new tokens',
    'controls.temperature': 'temperature (0: greedy)',
    'controls.genSeed': 'seed',

    'tokens.title': 'The members',
    'tokens.text': 'The prompt is cut into tokens: the members of the meeting. Each brings its word (token ' +
      'embedding) and its seat (position embedding); the bar under a member is the size of each. ' +
      '<strong>Click a member to silence it</strong>: nobody hears its answer any more (its key is ' +
      'masked in every layer and head) and the decision below is taken again without it.',
    'tokens.chip': (i, id, tok) => `token ${i}: id ${id}, "${tok}"`,
    'tokens.silence': ' — click to silence it',
    'tokens.unsilence': ' — click to let it speak',

    'prediction.title': 'The decision',
    'prediction.text': 'After the meeting the last token\'s output becomes a guess for the next token: a probability ' +
      'for every word in the vocabulary. These are the top candidates.',
    'prediction.baseline': 'Grey bars: the decision before you silenced someone or swapped Q and K.',

    'grid.title': 'Every meeting at once',
    'grid.text': 'Each layer holds one meeting per head, each head with its own kind of question. A tile shows ' +
      'who listens to whom in that head; the darker its frame, the more <em>focused</em> the head ' +
      '(on average, how much of its attention a token gives to one single other). Most focused ' +
      'first in the list below the grid. <strong>Click a tile to open its minutes.</strong>',
    'grid.head': (h) => `head ${h}`,
    'grid.layer': (l) => `layer ${l}`,
    'grid.focus': (f) => `focus ${f}`,
    'grid.tile': (l, h, f) => `layer ${l}, head ${h}: focus ${f}`,
    'grid.tileLast': (j) => `, the last token listens most to #${j}`,
    'grid.list': (l, h, f, e) => `L${l} H${h}: focus ${f}, entropy ${e} nats`,
    'grid.roles': 'A <strong>role</strong> under a tile names what the head does, measured on its own: ' +
      '<em>prev</em>ious-token (the mean weight a token gives to the one just before it, ≥ 0.6), <em>sink</em> ' +
      '(to the first token, ≥ 0.6), <em>self</em> (to itself, ≥ 0.6), all on this prompt (tokens after the first); ' +
      'and <em>induction</em> (≥ 0.4): on a fixed probe of random tokens repeated twice, how much a token of the ' +
      'second copy listens to the token that followed its own earlier occurrence, the head that continues a ' +
      'pattern it has seen.',
    'grid.role.induction': 'induction',
    'grid.role.previous_token': 'prev',
    'grid.role.self': 'self',
    'grid.role.first_token': 'sink',
    'grid.roleScores': (p, s, x, i) => `; prev ${p}, sink ${s}, self ${x}, induction ${i}`,

    'head.title': (l, h) => `Layer ${l}, head ${h}: the minutes`,
    'head.notation.paper': 'Paper notation ("Attention Is All You Need"): tokens are row vectors (1 × d). ' +
      'Row i is token i asking; softmax runs along each row, so every row adds up to 1.',
    'head.notation.3b1b': '3Blue1Brown notation: tokens are column vectors (d × 1). Column i is token i asking; ' +
      'softmax runs down each column, so every column adds up to 1. The same numbers as the paper\'s, transposed.',
    'head.scores.paper': 'The cell in row i, column j: <strong>the score</strong> Q<sub>i</sub>·K<sub>j</sub>, how well ' +
      'token j\'s kind of answer (its key) fits token i\'s question (its query). <strong>Scaled</strong>: divided by ' +
      '√d so the softmax does not saturate. <strong>Weights</strong>: the softmax turns one question\'s absolute ' +
      'scores (a row) into relative weights that add up to 1. Hatched cells are masked: a token only hears those ' +
      'before it (the causal mask), and nobody hears a silenced one. Hover a cell for its three numbers; ' +
      'click it to take its question to the softmax panel.',
    'head.scores.3b1b': 'The cell in row j, column i: <strong>the score</strong> K<sub>j</sub>·Q<sub>i</sub> (the matrix ' +
      'Kᵀ Q), how well token j\'s kind of answer (its key) fits token i\'s question (its query). <strong>Scaled</strong>: ' +
      'divided by √d so the softmax does not saturate. <strong>Weights</strong>: the softmax turns one question\'s ' +
      'absolute scores (a column) into relative weights that add up to 1. Hatched cells are masked: a token only ' +
      'hears those before it (the causal mask), and nobody hears a silenced one. Hover a cell for its three ' +
      'numbers; click it to take its question to the softmax panel.',
    'head.show': 'Show',
    'head.m.scores.paper': 'scores Q Kᵀ',
    'head.m.scores.3b1b': 'scores Kᵀ Q',
    'head.m.scaled': 'scaled',
    'head.m.weights': 'weights',
    'head.corner.paper': 'query ↓ / key →',
    'head.corner.3b1b': 'key ↓ / query →',
    'head.hover': 'Hover a cell.',
    'head.loading': 'loading…',
    'head.readout': (q, k, score, scale, scaled, w, qt, kt, masked) =>
      `Q${q}·K${k} = ${score}   scaled (×${scale}) = ${scaled}   weight = ${w}` +
      `   — token ${qt} asking, token ${kt} answering` + (masked ? ' (masked: it cannot hear this one)' : ''),
    'head.last.title': 'The last token: whom it listens to, and how much each answer counts',
    'head.last.text': 'A big weight on a small value says little: the second bar is ‖w<sub>j</sub> V<sub>j</sub>‖, ' +
      'how far each value actually moves the result.',

    'head.last.some': (k, n) => `${n} tokens: the ${k} the last token weighs most, in order.`,
    'head.canvas': (n) => `${n} tokens: drawn as one picture; hover for the numbers, click for a query`,

    'att.title': 'Who argued for the decision',
    'att.text': 'The last token\'s logit for the chosen token (the prediction, or the <em>target</em> you type) is a ' +
      'sum: every part of the model wrote into the last position\'s residual stream, and each part\'s share of ' +
      'the logit is what it argued, for (red, +) or against (blue, −). The parts: the token and position ' +
      'embeddings, each attention head (and, inside it, each member it listened to), each MLP, and the biases. ' +
      '<strong>By member</strong>: what every source token said through all heads together, the loudest first. ' +
      'With a <em>contrast</em> the quantity is the logit of the target minus that of the contrast: who tipped ' +
      'the balance between the two. Click a head in the table to open its minutes.',
    'att.note': 'The final LayerNorm divides by the residual\'s spread; that scale is frozen at this pass\'s value, ' +
      'which makes the logit an exact sum of the parts (the sum is shown next to the model\'s own logit).',
    'att.target': 'target token',
    'att.contrast': 'minus the contrast',
    'att.apply': 'Attribute',
    'att.inputs': 'one token each (keep a leading space: " of"); empty: the predicted token',
    'att.what': (t, id) => `logit of ${t} (id ${id}):`,
    'att.whatVs': (t, id, c, cid) => `logit of ${t} (id ${id}) − logit of ${c} (id ${cid}):`,
    'att.sumIs': '· sum of the parts:',
    'att.parts': 'The parts (attention: all heads of the layer; biases: every layer\'s and the final LayerNorm\'s)',
    'att.part.token': 'token embedding',
    'att.part.position': 'position embedding',
    'att.part.attn': (l) => `attention, layer ${l}`,
    'att.part.mlp': (l) => `MLP, layer ${l}`,
    'att.part.biases': 'biases',
    'att.sources': (k, n) => (k < n ? `By member: the ${k} loudest of ${n}, summed over heads` : 'By member, summed over heads'),
    'att.heads': 'By head (layer × head)',
    'att.headTitle': (l, h) => `layer ${l}, head ${h}: click to open its minutes`,

    'lens.title': 'The logit lens: the decision forming layer by layer',
    'lens.text': 'Stop the meeting early and ask for a decision anyway: the last token\'s residual stream after the ' +
      'embeddings, and after each layer, read through the final LayerNorm and the unembedding as if it were the ' +
      'end. Each row is that early guess, its most likely tokens first. The final prediction\'s token is ' +
      'framed wherever it appears, so you can see at which layer it rises to the top.',
    'lens.final': (t, id) => `The final prediction: ${t} (id ${id}), framed in each row.`,
    'lens.afterEmb': 'after the embeddings',
    'lens.afterLayer': (l) => `after layer ${l}`,
    'lens.rank': (r, p) => `final token: #${r}, ${p}`,
    'lens.absent': (n) => `final token: not in the top ${n}`,

    'qkv.title': (l, h) => `Layer ${l}, head ${h}: Q, K and V, dimension by dimension`,
    'qkv.text': 'The query Q<sub>i</sub> of the chosen token, every key K<sub>j</sub> and value V<sub>j</sub> of this ' +
      'head, one cell per dimension (red +, blue −). The score of key j is the dot product Q<sub>i</sub>·K<sub>j</sub>: ' +
      'the middle block takes it apart, one product q<sub>i</sub>[d] k<sub>j</sub>[d] per dimension, and adds them ' +
      'up (Σ) beside the model\'s own score. The dimensions where both are large and of the same sign make the ' +
      'match; opposite signs argue against it. V<sub>j</sub> is what key j hands over, weighted by w. Choose the ' +
      'query here, in the softmax panel, or by clicking a heatmap cell.',
    'qkv.query': 'query i',
    'qkv.embed': (i, t) => `E${i} ${t} = token embedding + position embedding:`,
    'qkv.e.title': (i) => `E${i}, the member as it enters the meeting: its word (a row of wte) plus its seat (a row of wpe)`,
    'qkv.e.token': 'token part',
    'qkv.e.position': 'position part',
    'qkv.input0': '(layer 0 reads E through its LayerNorm)',
    'qkv.inputL': (l) => `(layer ${l} reads the residual stream at this token, E plus what earlier layers added)`,
    'qkv.q': (i) => `The query Q${i}`,
    'qkv.k': 'The keys K_j',
    'qkv.prod': (i) => `Q${i} · K_j, dimension by dimension: q${i}[d] × k_j[d], their sum Σ and the model's score`,
    'qkv.v': 'The values V_j and the weight w each gets',
    'qkv.score': 'score',
    'qkv.canvas': (n) => `${n} tokens: each block drawn as one picture, a cell per token and dimension; hover for the numbers.`,
    'qkv.hover': 'Hover a cell.',
    'qkv.readout.vec': (name, d, v) => `${name}[${d}] = ${v}`,
    'qkv.readout.prod': (i, j, d, q, k, p, s, score) => `q${i}[${d}] × k${j}[${d}] = ${q} × ${k} = ${p};   ` +
      `Σ over the dimensions = ${s}, the model's score Q${i}·K${j} = ${score}`,
    'qkv.readout.masked': (i, j) => `query ${i} does not hear key ${j} (masked)`,
    'qkv.readout.sum': (i, j, s, score) => `Σ over the dimensions of q${i}[d] × k${j}[d] = ${s}, the model's score Q${i}·K${j} = ${score}`,

    'softmax.title': 'Softmax: absolute scores become relative weights',
    'softmax.text': 'One question, several answers. A score s<sub>j</sub> says how well answer j fits the question, ' +
      'on no fixed scale; the softmax turns the scores into weights between 0 and 1 that add up to 1. Dividing ' +
      'by τ first (the model uses τ = √d, d the size of a query) shrinks the gaps. Edit any number: the weights ' +
      'follow as you type.',
    'softmax.story': 'The seed post\'s example: in “I have a lot” the question Q<sub>lot</sub> gives lot a score of 100 ' +
      'and the other words 1, so lot\'s answer (a full stop) takes nearly all the weight. Put the question ' +
      '“Cash or credit card?” in front and one of its words insists with a score of 1000 that the next word is ' +
      '“of”: now that word takes all the weight and lot\'s 100 counts for nothing. Raise τ (try 300) and lot is ' +
      'heard again.',
    'softmax.stable': 'Subtracting m changes no weight (it cancels above and below the line) but keeps exp from ' +
      'overflowing: exp(1000) is beyond any floating-point number.',
    'softmax.presets': 'Presets',
    'softmax.preset.lot': '“I have a lot”: 100 and 1',
    'softmax.preset.cash': '“Cash or credit card? I have a lot”: 1000',
    'softmax.preset.pass': 'From the current pass',
    'softmax.query': 'query',
    'softmax.tau': 'τ (divide by)',
    'softmax.tauSqrt': (d) => `τ = √d = √${d}`,
    'softmax.add': '+ a score',
    'softmax.remove': 'remove this score',
    'softmax.col.key': 'answer (key)',
    'softmax.col.score': 'score s',
    'softmax.col.scaled': 's / τ',
    'softmax.col.weight': 'weight w',
    'softmax.col.model': 'the model\'s weight',
    'softmax.sum': (s) => `Σ w = ${s}`,
    'softmax.source.lot': 'The seed\'s numbers: Q_lot asks, lot answers with 100, the others with 1.',
    'softmax.source.cash': 'The seed\'s numbers with the question in front: card insists on “of” with 1000.',
    'softmax.source.pass': (l, h, q, qt, n) => `Layer ${l}, head ${h}: the raw scores Q·K of token ${q} ${qt}, ` +
      `τ = 1/scale; the last column is the model's own weight` + (n ? ` (${n} masked keys left out).` : '.'),
    'softmax.source.custom': 'Your own numbers.',
    'softmax.bad': 'Every score and τ must be a number, τ > 0.',
    'softmax.empty': 'Add a score.',

    'steps.title': 'Generation, step by step',
    'steps.text': 'The meeting does not end with one decision: the chosen token joins the table and the next ' +
      'meeting begins. Each step below is the pass that chose one new token (the loop of <code>jomoim ' +
      'generate</code>: the same temperature and seed give the same tokens): whom the last token so far ' +
      'listened to in the selected head, the distribution the token was chosen from, and who argued for it.',
    'steps.slider': 'step',
    'steps.label': (k, n, from, to, p) => `${k + 1} of ${n}: after ${from} → ${to} (p ${p})`,
    'steps.att': (l, h) => `the last token's attention in layer ${l}, head ${h} (click a tile above for another head):`,
    'steps.pred': 'The prediction it was chosen from',
    'steps.argued': 'Who argued for it (attention, by source token, summed over heads)',
    'steps.meta': (n, stop, how) => `${n} new tokens, ${how}; stopped: ${stop}.`,
    'steps.greedy': 'greedy (the most likely token each time)',
    'steps.sampled': (t, s) => `sampled at temperature ${t}, seed ${s}`,
    'steps.off': 'Generation is off while comparing, silencing or swapping Q and K: the steps are the plain model\'s.',
    'steps.tokTitle': (w) => `weight ${w}`,

    'compare.title': 'Two meetings side by side',
    'compare.text': 'The same last words, with and without something said before them. With a question in front ' +
      '("Cash or credit card?"), the earlier members have their own say about what follows "a lot"; ' +
      'the last token\'s attention (averaged over the heads of the chosen layer) spreads to them and ' +
      'the decision shifts.',
    'compare.shift': 'How the decision shifts',
    'compare.att': (l) => `the last token's attention, layer ${l} (mean over heads):`,
    'compare.tokTitle': (w, l) => `the last token gives ${w} of its attention here (layer ${l}, mean over heads)`,
    'compare.col.token': 'token',
    'compare.col.first': 'first',
    'compare.col.second': 'second',
    'compare.col.change': 'change',

    'status.running': 'the meeting is in session…',
    'status.done': (n, m) => `explained ${n} tokens` + (m === null ? '' : ` and ${m} to compare`),
    'model.summary': (name, L, H, E, D, P, V) => `model ${name}: ${L} layers × ${H} heads, ` +
      `${E} dimensions (${D} per head), context ${P} tokens, vocabulary ${V}`,
  },

  ko: {
    'doc.title': 'jomoim — 실시간으로 보는 조모임',
    'header.sub': '조모임 — 어텐션이 조모임이라면',
    'header.loading': '모델을 불러오는 중…',
    'lang.legend': '언어',
    'controls.prompt': '프롬프트',
    'controls.compare': '비교할 문장',
    'controls.notation': '표기법',
    'controls.paper': '논문 (행)',
    'controls.3b1b': '3Blue1Brown (열)',
    'controls.swap': 'Q와 K 바꾸기',
    'controls.seed': '원글의 예시',
    'controls.run': '설명하기',
    'controls.generation': '이어 쓰기',
    'controls.generate': '새 토큰 수',
    'controls.temperature': '온도 (0: 탐욕)',
    'controls.genSeed': '시드',

    'tokens.title': '조원들',
    'tokens.text': '프롬프트는 토큰으로 나뉩니다. 토큰 하나하나가 조모임의 조원입니다. 조원은 저마다 자기 단어(토큰 ' +
      '임베딩)와 자리(포지션 임베딩)를 가지고 오고, 조원 아래의 막대는 각각의 크기입니다. ' +
      '<strong>조원을 클릭하면 입을 막습니다</strong>: 아무도 그 조원의 대답을 듣지 못하고(모든 레이어와 헤드에서 ' +
      '그 키가 마스크됩니다) 아래의 결론을 그 조원 없이 다시 냅니다.',
    'tokens.chip': (i, id, tok) => `토큰 ${i}: id ${id}, "${tok}"`,
    'tokens.silence': ' — 클릭하면 입을 막습니다',
    'tokens.unsilence': ' — 클릭하면 다시 말할 수 있습니다',

    'prediction.title': '결론',
    'prediction.text': '조모임이 끝나면 마지막 토큰의 출력이 다음 토큰에 대한 추측이 됩니다. 어휘의 모든 단어에 확률이 ' +
      '하나씩 붙습니다. 아래는 가장 유력한 후보들입니다.',
    'prediction.baseline': '회색 막대: 누군가의 입을 막거나 Q와 K를 바꾸기 전의 결론.',

    'grid.title': '모든 조모임을 한눈에',
    'grid.text': '레이어마다 헤드 수만큼 조모임이 열리고, 헤드마다 저마다의 질문 주제가 있습니다. 타일은 그 헤드에서 ' +
      '누가 누구의 말을 듣는지 보여 줍니다. 테두리가 진할수록 그 헤드는 더 <em>집중</em>합니다(평균적으로 한 토큰이 ' +
      '다른 한 토큰에게 주는 어텐션의 크기). 그리드 아래 목록은 가장 집중하는 헤드부터 보여 줍니다. ' +
      '<strong>타일을 클릭하면 그 헤드의 회의록이 열립니다.</strong>',
    'grid.head': (h) => `헤드 ${h}`,
    'grid.layer': (l) => `레이어 ${l}`,
    'grid.focus': (f) => `집중도 ${f}`,
    'grid.tile': (l, h, f) => `레이어 ${l}, 헤드 ${h}: 집중도 ${f}`,
    'grid.tileLast': (j) => `, 마지막 토큰은 #${j}의 말을 가장 많이 듣습니다`,
    'grid.list': (l, h, f, e) => `L${l} H${h}: 집중도 ${f}, 엔트로피 ${e} nats`,
    'grid.roles': '타일 아래의 <strong>역할</strong>은 헤드 하나하나를 따로 재어 본 결과입니다. ' +
      '<em>직전</em>(토큰이 바로 앞 토큰에게 주는 평균 가중치, 0.6 이상), <em>첫 토큰</em>(맨 앞 토큰에게, 0.6 이상), ' +
      '<em>자기</em>(자기 자신에게, 0.6 이상)는 이 프롬프트에서(첫 토큰 다음부터) 잽니다. ' +
      '<em>유도</em>(induction, 0.4 이상)는 무작위 토큰을 두 번 반복한 고정된 시험 문장에서, 두 번째 반복의 토큰이 ' +
      '자기가 앞에서 나왔을 때 바로 다음에 왔던 토큰의 말을 얼마나 듣는지입니다. 본 적 있는 패턴을 이어 가는 헤드입니다.',
    'grid.role.induction': '유도',
    'grid.role.previous_token': '직전',
    'grid.role.self': '자기',
    'grid.role.first_token': '첫 토큰',
    'grid.roleScores': (p, s, x, i) => `; 직전 ${p}, 첫 토큰 ${s}, 자기 ${x}, 유도 ${i}`,

    'head.title': (l, h) => `레이어 ${l}, 헤드 ${h}의 회의록`,
    'head.notation.paper': '논문 표기법(“Attention Is All You Need”): 토큰은 행벡터(1 × d)입니다. ' +
      'i번째 행은 토큰 i의 질문입니다. 소프트맥스는 행마다 적용되므로 각 행의 합이 1입니다.',
    'head.notation.3b1b': '3Blue1Brown 표기법: 토큰은 열벡터(d × 1)입니다. i번째 열은 토큰 i의 질문입니다. ' +
      '소프트맥스는 열마다 적용되므로 각 열의 합이 1입니다. 논문과 같은 숫자를 전치한 것입니다.',
    'head.scores.paper': 'i행 j열의 칸: <strong>점수</strong> Q<sub>i</sub>·K<sub>j</sub>. 토큰 j가 줄 수 있는 대답의 ' +
      '결(키)이 토큰 i의 질문(쿼리)과 얼마나 잘 맞는지, 원글의 찰떡궁합점수입니다. <strong>스케일한 점수</strong>: ' +
      '소프트맥스가 포화되지 않도록 √d로 나눈 값. <strong>가중치</strong>: 소프트맥스가 한 질문의 절대적인 점수(한 행)를 ' +
      '합이 1인 상대적인 가중치로 바꿉니다. 빗금 친 칸은 마스크된 칸입니다. 토큰은 자기 앞의 토큰들의 말만 들을 수 ' +
      '있고(인과 마스크), 입이 막힌 조원의 말은 아무도 듣지 못합니다. 칸 위에 마우스를 올리면 세 숫자가 보이고, ' +
      '클릭하면 그 질문을 소프트맥스 패널로 가져갑니다.',
    'head.scores.3b1b': 'j행 i열의 칸: <strong>점수</strong> K<sub>j</sub>·Q<sub>i</sub>(행렬 Kᵀ Q). 토큰 j가 줄 수 있는 ' +
      '대답의 결(키)이 토큰 i의 질문(쿼리)과 얼마나 잘 맞는지, 원글의 찰떡궁합점수입니다. <strong>스케일한 점수</strong>: ' +
      '소프트맥스가 포화되지 않도록 √d로 나눈 값. <strong>가중치</strong>: 소프트맥스가 한 질문의 절대적인 점수(한 열)를 ' +
      '합이 1인 상대적인 가중치로 바꿉니다. 빗금 친 칸은 마스크된 칸입니다. 토큰은 자기 앞의 토큰들의 말만 들을 수 ' +
      '있고(인과 마스크), 입이 막힌 조원의 말은 아무도 듣지 못합니다. 칸 위에 마우스를 올리면 세 숫자가 보이고, ' +
      '클릭하면 그 질문을 소프트맥스 패널로 가져갑니다.',
    'head.show': '보기',
    'head.m.scores.paper': '점수 Q Kᵀ',
    'head.m.scores.3b1b': '점수 Kᵀ Q',
    'head.m.scaled': '스케일한 점수',
    'head.m.weights': '가중치',
    'head.corner.paper': '질문 ↓ / 키 →',
    'head.corner.3b1b': '키 ↓ / 질문 →',
    'head.hover': '칸 위에 마우스를 올려 보세요.',
    'head.loading': '불러오는 중…',
    'head.readout': (q, k, score, scale, scaled, w, qt, kt, masked) =>
      `Q${q}·K${k} = ${score}   스케일 (×${scale}) = ${scaled}   가중치 = ${w}` +
      `   — 질문: 토큰 ${qt}, 대답: 토큰 ${kt}` + (masked ? ' (마스크: 이 토큰의 말은 들을 수 없습니다)' : ''),
    'head.last.title': '마지막 토큰: 누구의 말을 듣고, 각 대답이 얼마나 반영되는가',
    'head.last.text': '가중치가 커도 값이 작으면 결과는 별로 움직이지 않습니다. 두 번째 막대는 ' +
      '‖w<sub>j</sub> V<sub>j</sub>‖, 각 값이 결과를 실제로 얼마나 움직이는지입니다.',

    'head.last.some': (k, n) => `토큰 ${n}개: 마지막 토큰이 가장 무겁게 듣는 ${k}개, 순서대로.`,
    'head.canvas': (n) => `토큰 ${n}개: 그림 한 장으로 그렸습니다. 마우스를 올리면 숫자가, 클릭하면 그 질문이 선택됩니다`,

    'att.title': '누가 결론을 밀었나',
    'att.text': '고른 토큰(예측, 또는 직접 넣은 <em>목표</em>)에 대한 마지막 토큰의 로짓은 합입니다. 모델의 모든 부분이 ' +
      '마지막 자리의 잔차 스트림에 무언가를 써 넣었고, 각 부분이 로짓에 보탠 몫이 그 부분의 주장입니다. ' +
      '찬성(빨강, +)이나 반대(파랑, −). 부분은 토큰 임베딩과 포지션 임베딩, 어텐션 헤드 하나하나(그리고 그 안에서 ' +
      '헤드가 말을 들은 조원 하나하나), MLP 하나하나, 그리고 편향입니다. <strong>조원별</strong>: 말한 토큰마다 모든 ' +
      '헤드를 통해 한 말을 합친 것, 목소리가 큰 조원부터. <em>대조</em> 토큰을 넣으면 목표의 로짓에서 대조의 로짓을 뺀 ' +
      '값을 나눕니다. 둘 사이에서 누가 저울을 기울였는지입니다. 표의 헤드를 클릭하면 그 헤드의 회의록이 열립니다.',
    'att.note': '마지막 LayerNorm은 잔차의 퍼짐으로 나눕니다. 그 스케일을 이번 패스의 값으로 고정하면 로짓이 부분들의 ' +
      '정확한 합이 됩니다(합은 모델이 직접 계산한 로짓 옆에 보여 줍니다).',
    'att.target': '목표 토큰',
    'att.contrast': '빼는 대조 토큰',
    'att.apply': '나눠 보기',
    'att.inputs': '각각 토큰 하나(앞의 공백도 넣으세요: " of"). 비워 두면 예측한 토큰',
    'att.what': (t, id) => `${t}(id ${id})의 로짓:`,
    'att.whatVs': (t, id, c, cid) => `${t}(id ${id})의 로짓 − ${c}(id ${cid})의 로짓:`,
    'att.sumIs': '· 부분들의 합:',
    'att.parts': '부분들 (어텐션: 그 레이어의 모든 헤드, 편향: 모든 레이어와 마지막 LayerNorm의 편향)',
    'att.part.token': '토큰 임베딩',
    'att.part.position': '포지션 임베딩',
    'att.part.attn': (l) => `어텐션, 레이어 ${l}`,
    'att.part.mlp': (l) => `MLP, 레이어 ${l}`,
    'att.part.biases': '편향',
    'att.sources': (k, n) => (k < n ? `조원별: ${n}명 중 목소리가 가장 큰 ${k}명, 헤드 합` : '조원별, 헤드 합'),
    'att.heads': '헤드별 (레이어 × 헤드)',
    'att.headTitle': (l, h) => `레이어 ${l}, 헤드 ${h}: 클릭하면 회의록이 열립니다`,

    'lens.title': '로짓 렌즈: 레이어마다 결론이 만들어지는 모습',
    'lens.text': '조모임을 중간에 멈추고 그래도 결론을 내 보라고 합니다. 임베딩 다음과 레이어 하나하나 다음의 마지막 ' +
      '토큰 잔차 스트림을, 그것이 끝인 것처럼 마지막 LayerNorm과 언임베딩으로 읽습니다. 각 행이 그 이른 추측이고, ' +
      '가장 유력한 토큰부터 놓입니다. 최종 예측 토큰은 나올 때마다 테두리를 둘러서, 어느 레이어에서 맨 위로 ' +
      '올라오는지 볼 수 있습니다.',
    'lens.final': (t, id) => `최종 예측: ${t}(id ${id}), 행마다 테두리로 표시.`,
    'lens.afterEmb': '임베딩 다음',
    'lens.afterLayer': (l) => `레이어 ${l} 다음`,
    'lens.rank': (r, p) => `최종 토큰: ${r}위, ${p}`,
    'lens.absent': (n) => `최종 토큰: 상위 ${n}개에 없음`,

    'qkv.title': (l, h) => `레이어 ${l}, 헤드 ${h}: Q, K, V를 차원별로`,
    'qkv.text': '고른 토큰의 쿼리 Q<sub>i</sub>와 이 헤드의 모든 키 K<sub>j</sub>, 값 V<sub>j</sub>를 차원마다 칸 하나로 ' +
      '그립니다(빨강 +, 파랑 −). 키 j의 점수는 내적 Q<sub>i</sub>·K<sub>j</sub>입니다. 가운데 블록은 그것을 차원마다의 ' +
      '곱 q<sub>i</sub>[d] k<sub>j</sub>[d]로 나누고, 더한 값(Σ)을 모델이 직접 계산한 점수 옆에 둡니다. 두 값이 모두 ' +
      '크고 부호가 같은 차원이 찰떡궁합을 만들고, 부호가 반대인 차원은 궁합을 깎습니다. V<sub>j</sub>는 키 j가 ' +
      '건네는 값이고, 가중치 w만큼 반영됩니다. 질문은 여기, 소프트맥스 패널, 또는 히트맵 칸을 클릭해 고릅니다.',
    'qkv.query': '질문 i',
    'qkv.embed': (i, t) => `E${i} ${t} = 토큰 임베딩 + 포지션 임베딩:`,
    'qkv.e.title': (i) => `E${i}, 회의에 들어오는 조원: 단어(wte의 한 행)에 자리(wpe의 한 행)를 더한 것`,
    'qkv.e.token': '토큰 부분',
    'qkv.e.position': '포지션 부분',
    'qkv.input0': '(레이어 0은 E를 LayerNorm을 거쳐 읽습니다)',
    'qkv.inputL': (l) => `(레이어 ${l}은 이 토큰의 잔차 스트림, 곧 E에 앞 레이어들이 더한 것을 읽습니다)`,
    'qkv.q': (i) => `쿼리 Q${i}`,
    'qkv.k': '키 K_j',
    'qkv.prod': (i) => `Q${i} · K_j를 차원별로: q${i}[d] × k_j[d], 그 합 Σ와 모델의 점수`,
    'qkv.v': '값 V_j와 각각이 받는 가중치 w',
    'qkv.score': '점수',
    'qkv.canvas': (n) => `토큰 ${n}개: 블록마다 그림 한 장, 토큰과 차원마다 칸 하나. 마우스를 올리면 숫자가 보입니다.`,
    'qkv.hover': '칸 위에 마우스를 올려 보세요.',
    'qkv.readout.vec': (name, d, v) => `${name}의 차원 ${d} = ${v}`,
    'qkv.readout.prod': (i, j, d, q, k, p, s, score) => `q${i}[${d}] × k${j}[${d}] = ${q} × ${k} = ${p};   ` +
      `모든 차원의 합 = ${s}, 모델의 점수 Q${i}·K${j} = ${score}`,
    'qkv.readout.masked': (i, j) => `질문 ${i}는 키 ${j}의 말을 듣지 못합니다 (마스크)`,
    'qkv.readout.sum': (i, j, s, score) => `q${i}[d] × k${j}[d]의 모든 차원 합 = ${s}, 모델의 점수 Q${i}·K${j} = ${score}`,

    'softmax.title': '소프트맥스: 절대적인 점수 ⇒ 상대적인 가중치',
    'softmax.text': '질문 하나에 대답이 여럿. 점수 s<sub>j</sub>는 대답 j가 질문과 얼마나 잘 맞는지를 나타내지만 정해진 ' +
      '범위가 없습니다. 소프트맥스는 점수들을 합이 1인 0에서 1 사이의 가중치로 바꿉니다. 먼저 τ로 나누면(모델은 ' +
      'τ = √d, d는 쿼리의 크기) 차이가 줄어듭니다. 숫자를 고치면 입력하는 대로 가중치가 바뀝니다.',
    'softmax.story': '원글의 예시: “I have a lot”에서 질문 Q<sub>lot</sub>에 대해 lot은 100, 나머지 단어들은 1의 ' +
      '점수를 가집니다. lot의 대답(마침표)이 가중치를 거의 다 가져갑니다. 앞에 “Cash or credit card?”라는 질문이 ' +
      '있으면, 질문의 단어가 다음 단어는 “of”여야 한다고 1000의 점수로 강하게 주장합니다. 이제 그 단어가 가중치를 ' +
      '전부 가져가고 lot의 100은 아무 힘이 없습니다. τ를 키우면(300을 넣어 보세요) lot의 목소리가 다시 들립니다.',
    'softmax.stable': 'm을 빼도 가중치는 그대로지만(분자와 분모에서 약분됩니다) exp가 넘치지 않습니다. ' +
      'exp(1000)은 어떤 부동소수점 수보다도 큽니다.',
    'softmax.presets': '예시',
    'softmax.preset.lot': '“I have a lot”: 100점과 1점',
    'softmax.preset.cash': '“Cash or credit card? I have a lot”: 1000점',
    'softmax.preset.pass': '지금 계산한 결과에서',
    'softmax.query': '질문',
    'softmax.tau': 'τ (나누는 수)',
    'softmax.tauSqrt': (d) => `τ = √d = √${d}`,
    'softmax.add': '+ 점수 추가',
    'softmax.remove': '이 점수 지우기',
    'softmax.col.key': '대답 (키)',
    'softmax.col.score': '점수 s',
    'softmax.col.scaled': 's / τ',
    'softmax.col.weight': '가중치 w',
    'softmax.col.model': '모델의 가중치',
    'softmax.sum': (s) => `Σ w = ${s}`,
    'softmax.source.lot': '원글의 숫자: Q_lot이 묻고, lot은 100, 나머지는 1로 대답합니다.',
    'softmax.source.cash': '앞에 질문이 있을 때의 원글의 숫자: card가 1000으로 “of”를 주장합니다.',
    'softmax.source.pass': (l, h, q, qt, n) => `레이어 ${l}, 헤드 ${h}: 토큰 ${q} ${qt}의 원래 점수 Q·K, ` +
      `τ = 1/scale. 마지막 열은 모델이 직접 계산한 가중치입니다` + (n ? ` (마스크된 키 ${n}개는 뺐습니다).` : '.'),
    'softmax.source.custom': '직접 넣은 숫자.',
    'softmax.bad': '모든 점수와 τ는 숫자여야 하고, τ > 0이어야 합니다.',
    'softmax.empty': '점수를 추가하세요.',

    'steps.title': '한 토큰씩 이어 쓰기',
    'steps.text': '조모임은 결론 하나로 끝나지 않습니다. 고른 토큰이 자리에 앉으면 다음 조모임이 열립니다. ' +
      '아래의 단계 하나하나는 새 토큰 하나를 고른 패스입니다(<code>jomoim generate</code>와 같은 반복: ' +
      '온도와 시드가 같으면 같은 토큰이 나옵니다). 선택한 헤드에서 지금까지의 마지막 토큰이 누구의 말을 들었는지, ' +
      '그 토큰을 고른 확률 분포, 그리고 누가 그 토큰을 밀었는지 보여 줍니다.',
    'steps.slider': '단계',
    'steps.label': (k, n, from, to, p) => `${n}단계 중 ${k + 1}: ${from} 다음 → ${to} (확률 ${p})`,
    'steps.att': (l, h) => `레이어 ${l}, 헤드 ${h}에서 마지막 토큰의 어텐션 (다른 헤드는 위의 타일을 클릭):`,
    'steps.pred': '그 토큰을 고른 확률 분포',
    'steps.argued': '누가 그 토큰을 밀었나 (어텐션, 말한 토큰별, 헤드 합)',
    'steps.meta': (n, stop, how) => `새 토큰 ${n}개, ${how}; 멈춘 이유: ${stop}.`,
    'steps.greedy': '탐욕 선택(매번 가장 유력한 토큰)',
    'steps.sampled': (t, s) => `온도 ${t}, 시드 ${s}로 표집`,
    'steps.off': '비교하거나 입을 막거나 Q와 K를 바꾸는 동안에는 이어 쓰기를 하지 않습니다. 단계는 원래 모델의 것입니다.',
    'steps.tokTitle': (w) => `가중치 ${w}`,

    'compare.title': '두 조모임 나란히 보기',
    'compare.text': '같은 마지막 단어들을, 앞에 한 말이 있을 때와 없을 때 비교합니다. 앞에 질문(“Cash or credit ' +
      'card?”)이 있으면 앞선 조원들도 “a lot” 뒤에 무엇이 올지 할 말이 생깁니다. 마지막 토큰의 어텐션(선택한 ' +
      '레이어의 헤드 평균)이 그 조원들에게도 퍼지고 결론이 바뀝니다.',
    'compare.shift': '결론이 어떻게 바뀌는가',
    'compare.att': (l) => `마지막 토큰의 어텐션, 레이어 ${l} (헤드 평균):`,
    'compare.tokTitle': (w, l) => `마지막 토큰이 여기에 주는 어텐션 ${w} (레이어 ${l}, 헤드 평균)`,
    'compare.col.token': '토큰',
    'compare.col.first': '첫 문장',
    'compare.col.second': '둘째 문장',
    'compare.col.change': '변화',

    'status.running': '조모임 진행 중…',
    'status.done': (n, m) => `토큰 ${n}개를 설명했습니다` + (m === null ? '' : ` (비교 문장 토큰 ${m}개)`),
    'model.summary': (name, L, H, E, D, P, V) => `모델 ${name}: 레이어 ${L}개 × 헤드 ${H}개, ` +
      `${E}차원(헤드당 ${D}), 컨텍스트 ${P}토큰, 어휘 ${V}개`,
  },
};

// The text for key in lang, with args for the functions; English when a key is missing.
export function text(lang, key, ...args) {
  const v = (TEXTS[lang] && key in TEXTS[lang]) ? TEXTS[lang][key] : TEXTS.en[key];
  if (v === undefined) throw new Error(`no text ${key}`);
  return typeof v === 'function' ? v(...args) : v;
}
