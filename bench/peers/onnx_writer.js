'use strict';
// onnx_writer.js — writes the protobuf bytes of a one-node ONNX model, so the ONNX Runtime peer
// needs no `onnx` Python package and no model file on disk. Not a general ONNX library: it knows
// only the messages and fields such a model uses (numbers from onnx/onnx.proto).

// Protobuf wire types.
const VARINT = 0;
const LEN = 2;
const FIXED32 = 5;

// Appends protobuf fields to a list of byte chunks.
class Message {
  constructor() {
    this.chunks = [];
  }

  varint(value) {
    // int64 fields hold negatives as 64-bit two's complement: ten bytes on the wire.
    let v = BigInt.asUintN(64, BigInt(value));
    const bytes = [];
    while (v >= 0x80n) {
      bytes.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    bytes.push(Number(v));
    this.chunks.push(Buffer.from(bytes));
    return this;
  }
  tag(field, wireType) {
    return this.varint((field << 3) | wireType);
  }
  int(field, value) {
    return this.tag(field, VARINT).varint(value);
  }
  float(field, value) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(value);
    this.tag(field, FIXED32).chunks.push(b);
    return this;
  }
  bytes(field, buffer) {
    this.tag(field, LEN).varint(buffer.length).chunks.push(buffer);
    return this;
  }
  string(field, text) {
    return this.bytes(field, Buffer.from(text, 'utf8'));
  }
  message(field, msg) {
    return this.bytes(field, msg.toBuffer());
  }
  toBuffer() {
    return Buffer.concat(this.chunks);
  }
}

const FLOAT = 1; // TensorProto.DataType
const AttributeType = { float: 1, int: 2, string: 3 };

// AttributeProto: name = 1, f = 2, i = 3, s = 4, type = 20.
function attribute(name, value) {
  const m = new Message().string(1, name);
  if (typeof value === 'string') return m.string(4, value).int(20, AttributeType.string);
  if (Number.isInteger(value)) return m.int(3, value).int(20, AttributeType.int);
  return m.float(2, value).int(20, AttributeType.float);
}

// ValueInfoProto { name = 1, type = 2 { tensor_type = 1 { elem_type = 1, shape = 2 { dim = 1
// { dim_value = 1 } } } } }: a float32 tensor of fixed shape.
function floatTensor(name, dims) {
  const shape = new Message();
  for (const d of dims) shape.message(1, new Message().int(1, d));
  const tensorType = new Message().int(1, FLOAT).message(2, shape);
  return new Message().string(1, name).message(2, new Message().message(1, tensorType));
}

// A model whose graph is one node.
//   op: { type, domain ('' for the standard ops), attributes: {name: int | float | string} }
//   inputs / outputs: { name: dims }, in the node's argument order
//   opsets: { domain: version }; irVersion: the IR version the opsets need
function oneNodeModel({ op, inputs, outputs, opsets, irVersion }) {
  // NodeProto: input = 1, output = 2, name = 3, op_type = 4, attribute = 5, domain = 7.
  const node = new Message();
  for (const name of Object.keys(inputs)) node.string(1, name);
  for (const name of Object.keys(outputs)) node.string(2, name);
  node.string(3, 'attention').string(4, op.type);
  for (const [name, value] of Object.entries(op.attributes || {})) node.message(5, attribute(name, value));
  if (op.domain) node.string(7, op.domain);

  // GraphProto: node = 1, name = 2, input = 11, output = 12.
  const graph = new Message().message(1, node).string(2, 'one_node');
  for (const [name, dims] of Object.entries(inputs)) graph.message(11, floatTensor(name, dims));
  for (const [name, dims] of Object.entries(outputs)) graph.message(12, floatTensor(name, dims));

  // ModelProto: ir_version = 1, producer_name = 2, graph = 7, opset_import = 8 { domain = 1, version = 2 }.
  const model = new Message().int(1, irVersion).string(2, 'jomoim-bench').message(7, graph);
  for (const [domain, version] of Object.entries(opsets))
    model.message(8, new Message().string(1, domain).int(2, version));
  return model.toBuffer();
}

module.exports = { oneNodeModel };
