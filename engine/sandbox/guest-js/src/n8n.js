// n8n's semantics for workflows imported from n8n (`sluice import` of an n8n
// export): items, paired items, expressions (`={{ $json.x }}`,
// `$('Node').item.json`, `$now`, any JavaScript inside `{{ }}`), and the
// logic of n8n's core nodes over items. Imported `code.js` nodes call it as
// the global `n8n`; it is installed with the prelude, before the snapshot.
//
// A message between imported nodes is n8n's list of items:
// `[{"json": {...}, "paired": {"<node name>": <index in its output>, ...}}]`.
// `paired` records, for each earlier n8n node, which of its output items
// this item comes from: `$('Node').item` reads it.
(() => {
  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
  const typeName = (v) =>
    v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "object" ? "object" : typeof v;

  class N8nError extends Error {
    constructor(message) {
      super(message);
      this.name = "n8n";
    }
  }

  // ---- DateTime: the part of Luxon that expressions use (UTC) ------------
  const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December"];
  const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  const pad = (n, w = 2) => String(Math.abs(n)).padStart(w, "0");
  const UNIT_MS = { millisecond: 1, second: 1e3, minute: 6e4, hour: 36e5, day: 864e5, week: 6048e5 };
  const unitName = (u) => String(u).replace(/s$/, "");
  class DateTime {
    constructor(ms) {
      this.ts = ms;
      this.isLuxonDateTime = true;
    }
    static now() { return new DateTime(Date.now()); }
    static local() { return DateTime.now(); }
    static utc() { return DateTime.now(); }
    static fromMillis(ms) { return new DateTime(Number(ms)); }
    static fromSeconds(s) { return new DateTime(Number(s) * 1000); }
    static fromJSDate(d) { return new DateTime(d.getTime()); }
    static fromISO(s) {
      const ms = Date.parse(String(s));
      if (Number.isNaN(ms)) throw new N8nError(`DateTime.fromISO: \`${s}\` is not an ISO date`);
      return new DateTime(ms);
    }
    get d() { return new Date(this.ts); }
    get year() { return this.d.getUTCFullYear(); }
    get month() { return this.d.getUTCMonth() + 1; }
    get day() { return this.d.getUTCDate(); }
    get hour() { return this.d.getUTCHours(); }
    get minute() { return this.d.getUTCMinutes(); }
    get second() { return this.d.getUTCSeconds(); }
    get millisecond() { return this.d.getUTCMilliseconds(); }
    get weekday() { return this.d.getUTCDay() || 7; }
    get isValid() { return !Number.isNaN(this.ts); }
    toMillis() { return this.ts; }
    valueOf() { return this.ts; }
    toSeconds() { return this.ts / 1000; }
    toUnixInteger() { return Math.floor(this.ts / 1000); }
    toJSDate() { return new Date(this.ts); }
    toISO() {
      return this.d.toISOString().replace("Z", "+00:00");
    }
    toISODate() { return this.d.toISOString().slice(0, 10); }
    toISOTime() { return this.d.toISOString().slice(11, 23) + "+00:00"; }
    toString() { return this.toISO(); }
    toJSON() { return this.toISO(); }
    toFormat(fmt) {
      const d = this.d;
      const h = d.getUTCHours();
      const tokens = {
        yyyy: () => String(d.getUTCFullYear()), yy: () => pad(d.getUTCFullYear() % 100),
        MMMM: () => MONTHS[d.getUTCMonth()], MMM: () => MONTHS[d.getUTCMonth()].slice(0, 3),
        LLLL: () => MONTHS[d.getUTCMonth()], LLL: () => MONTHS[d.getUTCMonth()].slice(0, 3),
        MM: () => pad(d.getUTCMonth() + 1), M: () => String(d.getUTCMonth() + 1),
        LL: () => pad(d.getUTCMonth() + 1), L: () => String(d.getUTCMonth() + 1),
        dd: () => pad(d.getUTCDate()), d: () => String(d.getUTCDate()),
        EEEE: () => DAYS[d.getUTCDay()], EEE: () => DAYS[d.getUTCDay()].slice(0, 3),
        cccc: () => DAYS[d.getUTCDay()], ccc: () => DAYS[d.getUTCDay()].slice(0, 3),
        HH: () => pad(h), H: () => String(h),
        hh: () => pad(h % 12 || 12), h: () => String(h % 12 || 12),
        mm: () => pad(d.getUTCMinutes()), m: () => String(d.getUTCMinutes()),
        ss: () => pad(d.getUTCSeconds()), s: () => String(d.getUTCSeconds()),
        SSS: () => pad(d.getUTCMilliseconds(), 3), a: () => (h < 12 ? "AM" : "PM"),
        ZZ: () => "+00:00", Z: () => "+0", z: () => "UTC",
      };
      const names = Object.keys(tokens).sort((a, b) => b.length - a.length);
      let out = "";
      for (let i = 0; i < fmt.length;) {
        if (fmt[i] === "'") {
          const end = fmt.indexOf("'", i + 1);
          out += fmt.slice(i + 1, end < 0 ? fmt.length : end);
          i = end < 0 ? fmt.length : end + 1;
          continue;
        }
        const t = names.find((n) => fmt.startsWith(n, i));
        if (t) {
          out += tokens[t]();
          i += t.length;
        } else {
          out += fmt[i++];
        }
      }
      return out;
    }
    plus(dur) { return this.shift(dur, 1); }
    minus(dur) { return this.shift(dur, -1); }
    shift(dur, sign) {
      if (typeof dur === "number") return new DateTime(this.ts + sign * dur);
      const d = this.d;
      for (const [k, v] of Object.entries(dur || {})) {
        const u = unitName(k);
        if (u === "month") d.setUTCMonth(d.getUTCMonth() + sign * v);
        else if (u === "year") d.setUTCFullYear(d.getUTCFullYear() + sign * v);
        else if (u === "quarter") d.setUTCMonth(d.getUTCMonth() + 3 * sign * v);
        else if (UNIT_MS[u]) d.setTime(d.getTime() + sign * v * UNIT_MS[u]);
        else throw new N8nError(`DateTime.plus: unknown unit \`${k}\``);
      }
      return new DateTime(d.getTime());
    }
    startOf(unit) {
      const d = this.d;
      switch (unitName(unit)) {
        case "year": d.setUTCMonth(0, 1); d.setUTCHours(0, 0, 0, 0); break;
        case "month": d.setUTCDate(1); d.setUTCHours(0, 0, 0, 0); break;
        case "week": d.setUTCDate(d.getUTCDate() - ((d.getUTCDay() + 6) % 7)); d.setUTCHours(0, 0, 0, 0); break;
        case "day": d.setUTCHours(0, 0, 0, 0); break;
        case "hour": d.setUTCMinutes(0, 0, 0); break;
        case "minute": d.setUTCSeconds(0, 0); break;
        case "second": d.setUTCMilliseconds(0); break;
        default: throw new N8nError(`DateTime.startOf: unknown unit \`${unit}\``);
      }
      return new DateTime(d.getTime());
    }
    endOf(unit) {
      const next = this.startOf(unit).plus({ [unitName(unit)]: 1 });
      return new DateTime(next.ts - 1);
    }
    diff(other, unit = "milliseconds") {
      const ms = this.ts - other.ts;
      const u = unitName(unit);
      const v = UNIT_MS[u] ? ms / UNIT_MS[u] : ms;
      return { [unit]: v, toMillis: () => ms, as: (x) => ms / (UNIT_MS[unitName(x)] || 1) };
    }
    equals(o) { return o && o.ts === this.ts; }
    setZone() { return this; }
    toLocal() { return this; }
    toUTC() { return this; }
  }

  // ---- expressions --------------------------------------------------------
  // The `{{ … }}` segments of a template: JavaScript, which may itself hold
  // braces, strings and template literals.
  function segments(tpl) {
    const out = [];
    let i = 0;
    let text = "";
    while (i < tpl.length) {
      const open = tpl.indexOf("{{", i);
      if (open < 0) {
        text += tpl.slice(i);
        break;
      }
      text += tpl.slice(i, open);
      let j = open + 2;
      let depth = 0;
      let quote = null;
      while (j < tpl.length) {
        const c = tpl[j];
        if (quote) {
          if (c === "\\") j++;
          else if (c === quote) quote = null;
        } else if (c === "'" || c === '"' || c === "`") quote = c;
        else if (c === "{") depth++;
        else if (c === "}") {
          if (depth === 0 && tpl[j + 1] === "}") break;
          depth = Math.max(0, depth - 1);
        }
        j++;
      }
      if (j >= tpl.length) {
        // No closing braces: the rest is text, as n8n shows it.
        text += tpl.slice(open);
        break;
      }
      out.push({ text });
      text = "";
      out.push({ code: tpl.slice(open + 2, j) });
      i = j + 2;
    }
    if (text !== "" || out.length === 0) out.push({ text });
    return out;
  }

  // n8n prints values into text this way (objects as JSON).
  function toText(v) {
    if (v === undefined || v === null) return "";
    if (v instanceof DateTime) return v.toISO();
    if (v instanceof Date) return v.toISOString();
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  const compiled = new Map();
  const NAMES = ["$json", "$input", "$", "$node", "$now", "$today", "$items", "$execution",
    "$workflow", "$itemIndex", "$runIndex", "$vars", "$prevNode", "$parameter", "$binary",
    "DateTime", "Duration", "$jmespath", "$env"];

  function compile(code) {
    let f = compiled.get(code);
    if (!f) {
      try {
        f = new Function(...NAMES, `return (${code}\n);`);
      } catch (e) {
        throw new N8nError(`the expression {{${code}}} does not parse: ${e.message}`);
      }
      compiled.set(code, f);
    }
    return f;
  }

  // Evaluates one parameter value: a string starting with `=` is an
  // expression template; objects and arrays are walked.
  function resolve(value, scope) {
    if (typeof value === "string") {
      if (!value.startsWith("=")) return value;
      const parts = segments(value.slice(1));
      const run = (p) => {
        try {
          return compile(p.code)(...NAMES.map((n) => scope[n]));
        } catch (e) {
          if (e instanceof N8nError) throw e;
          throw new N8nError(`{{${p.code}}}: ${e && e.message ? e.message : e}`);
        }
      };
      if (parts.length === 1 && parts[0].code !== undefined) return run(parts[0]);
      if (parts.length === 2 && parts[0].text === "" && parts[1].code !== undefined) {
        return run(parts[1]);
      }
      return parts.map((p) => (p.code !== undefined ? toText(run(p)) : p.text)).join("");
    }
    if (Array.isArray(value)) return value.map((v) => resolve(v, scope));
    if (isObject(value)) {
      const out = {};
      for (const [k, v] of Object.entries(value)) out[k] = resolve(v, scope);
      return out;
    }
    return value;
  }

  // ---- the context of one node --------------------------------------------
  // `input`: `{"items": [...], "nodes": {"<name>": [...]}, "node": "<this
  // node's n8n name>", "execution": {...}, "workflow": {...}}`.
  function context(input) {
    const items = toItems(input && input.items !== undefined ? input.items : input);
    const nodes = (input && input.nodes) || {};
    const name = (input && input.node) || "node";
    return new Context(items, nodes, name, input || {});
  }

  function toItems(v) {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) v = [v];
    return v.map((it) => (isObject(it) && isObject(it.json) ? it : { json: isObject(it) ? it : { data: it } }));
  }

  class Context {
    constructor(items, nodes, name, raw) {
      this.items = items;
      this.nodes = nodes;
      this.name = name;
      this.raw = raw;
    }

    nodeItems(name) {
      const items = this.nodes[name];
      if (items === undefined) {
        throw new N8nError(`Referenced node is unexecuted or unknown: \`${name}\``);
      }
      return toItems(items);
    }

    // The item of node `name` that item `i` of the input comes from.
    pairedOf(name, i) {
      const list = this.nodeItems(name);
      const item = this.items[i];
      const at = item && item.paired ? item.paired[name] : undefined;
      if (at !== undefined && list[at]) return list[at];
      if (list.length === 1) return list[0];
      if (list[i]) return list[i];
      throw new N8nError(`Can't get data for expression: no item of \`${name}\` pairs with item ${i}`);
    }

    scope(i) {
      const self = this;
      const item = this.items[i] || { json: {} };
      const access = (name) => ({
        get item() { return self.pairedOf(name, i); },
        get json() { return self.pairedOf(name, i).json; },
        first: () => self.nodeItems(name)[0],
        last: () => { const l = self.nodeItems(name); return l[l.length - 1]; },
        all: () => self.nodeItems(name),
        itemMatching: (k) => self.pairedOf(name, k),
        get isExecuted() { return self.nodes[name] !== undefined; },
      });
      const now = DateTime.now();
      return {
        $json: item.json,
        $binary: item.binary || {},
        $input: {
          item,
          all: () => this.items,
          first: () => this.items[0],
          last: () => this.items[this.items.length - 1],
          params: {},
        },
        $: access,
        $node: new Proxy({}, { get: (_, name) => access(String(name)) }),
        $items: (name) => (name === undefined ? this.items : this.nodeItems(name)),
        $now: now,
        $today: now.startOf("day"),
        $execution: Object.assign({ id: "", mode: "production", resumeUrl: "" }, this.raw.execution || {}),
        $workflow: Object.assign({ id: "", name: "", active: true }, this.raw.workflow || {}),
        $itemIndex: i,
        $runIndex: 0,
        item,
        $vars: this.raw.vars || {},
        $env: {},
        $prevNode: { name: this.raw.prev || "" },
        $parameter: {},
        DateTime,
        Duration: { fromObject: (o) => o },
        $jmespath: () => { throw new N8nError("$jmespath is not supported in imported workflows"); },
      };
    }

    // An output item made from input item `i`.
    out(json, i, extra) {
      const from = this.items[i];
      const paired = Object.assign({}, (from && from.paired) || {});
      const o = { json: isObject(json) ? json : { data: json }, paired };
      if (extra) Object.assign(o, extra);
      return o;
    }

    // Stamps this node's name and each item's own index into `paired`.
    done(list) {
      list.forEach((it, k) => {
        it.paired = Object.assign({}, it.paired || {}, { [this.name]: k });
      });
      return list;
    }

    resolveFor(i, value) {
      return resolve(value, this.scope(i));
    }
  }

  // ---- values and conditions (If, Filter, Switch) -------------------------
  const getPath = (obj, path, dot = true) => {
    if (!dot) return obj == null ? undefined : obj[path];
    let cur = obj;
    for (const k of String(path).replace(/\[(\d+)\]/g, ".$1").split(".").filter((s) => s !== "")) {
      if (cur == null) return undefined;
      cur = cur[k];
    }
    return cur;
  };
  const setPath = (obj, path, value, dot = true) => {
    if (!dot) {
      obj[path] = value;
      return;
    }
    const keys = String(path).replace(/\[(\d+)\]/g, ".$1").split(".").filter((s) => s !== "");
    let cur = obj;
    keys.forEach((k, n) => {
      if (n === keys.length - 1) cur[k] = value;
      else {
        if (!isObject(cur[k]) && !Array.isArray(cur[k])) cur[k] = /^\d+$/.test(keys[n + 1]) ? [] : {};
        cur = cur[k];
      }
    });
  };

  function convertTo(type, v, loose, side) {
    const fail = () => {
      const shown = typeof v === "string" ? `'${v}'` : JSON.stringify(v);
      throw new N8nError(
        `Wrong type: ${shown} is ${v === null ? "null" : `a ${typeName(v)}`} but was expecting a ${type}` +
          ` (the ${side} value; turn on "Convert types where required")`,
      );
    };
    if (v === undefined || v === null) return v;
    switch (type) {
      case "string":
        if (typeof v === "string") return v;
        if (loose) return typeof v === "object" ? JSON.stringify(v) : String(v);
        return fail();
      case "number":
        if (typeof v === "number") return v;
        if (loose && typeof v === "string" && v.trim() !== "" && !Number.isNaN(Number(v))) return Number(v);
        if (loose && typeof v === "boolean") return Number(v);
        return fail();
      case "boolean":
        if (typeof v === "boolean") return v;
        if (loose) {
          if (v === "true" || v === 1 || v === "1") return true;
          if (v === "false" || v === 0 || v === "0") return false;
        }
        return fail();
      case "dateTime": {
        if (v instanceof DateTime) return v;
        const ms = typeof v === "number" ? v : Date.parse(String(v));
        if (Number.isNaN(ms)) return fail();
        return new DateTime(ms);
      }
      case "array":
        if (Array.isArray(v)) return v;
        if (loose && typeof v === "string") { try { const p = JSON.parse(v); if (Array.isArray(p)) return p; } catch (e) {} }
        return fail();
      case "object":
        if (isObject(v)) return v;
        if (loose && typeof v === "string") { try { const p = JSON.parse(v); if (isObject(p)) return p; } catch (e) {} }
        return fail();
      default:
        return v;
    }
  }

  const isEmpty = (v) =>
    v === undefined || v === null || v === "" ||
    (Array.isArray(v) && v.length === 0) || (isObject(v) && Object.keys(v).length === 0);

  function test(cond, opts) {
    const op = cond.operator || {};
    const type = op.type || "string";
    const operation = op.operation || "equals";
    const loose = !!opts.loose;
    const ci = opts.caseSensitive === false;
    if (operation === "exists") return cond.leftValue !== undefined && cond.leftValue !== null;
    if (operation === "notExists") return cond.leftValue === undefined || cond.leftValue === null;
    if (operation === "empty") return isEmpty(cond.leftValue);
    if (operation === "notEmpty") return !isEmpty(cond.leftValue);
    let l = convertTo(type, cond.leftValue, loose, "left");
    let r = op.singleValue ? undefined : convertTo(type === "array" && !/length/i.test(operation) ? undefined : type, cond.rightValue, loose, "right");
    if (type === "string" && ci) {
      if (typeof l === "string") l = l.toLowerCase();
      if (typeof r === "string") r = r.toLowerCase();
    }
    const num = (x) => (x instanceof DateTime ? x.ts : x);
    switch (type + ":" + operation) {
      case "string:equals": case "number:equals": case "boolean:equals": return l === r;
      case "string:notEquals": case "number:notEquals": case "boolean:notEquals": return l !== r;
      case "dateTime:equals": return l && r && l.ts === r.ts;
      case "dateTime:notEquals": return !(l && r && l.ts === r.ts);
      case "string:contains": return String(l ?? "").includes(r);
      case "string:notContains": return !String(l ?? "").includes(r);
      case "string:startsWith": return String(l ?? "").startsWith(r);
      case "string:notStartsWith": return !String(l ?? "").startsWith(r);
      case "string:endsWith": return String(l ?? "").endsWith(r);
      case "string:notEndsWith": return !String(l ?? "").endsWith(r);
      case "string:regex": return regex(r, ci).test(String(l ?? ""));
      case "string:notRegex": return !regex(r, ci).test(String(l ?? ""));
      case "number:gt": case "dateTime:after": return num(l) > num(r);
      case "number:lt": case "dateTime:before": return num(l) < num(r);
      case "number:gte": case "dateTime:afterOrEquals": return num(l) >= num(r);
      case "number:lte": case "dateTime:beforeOrEquals": return num(l) <= num(r);
      case "boolean:true": return l === true;
      case "boolean:false": return l === false;
      case "array:contains": return (l || []).some((x) => JSON.stringify(x) === JSON.stringify(cond.rightValue));
      case "array:notContains": return !(l || []).some((x) => JSON.stringify(x) === JSON.stringify(cond.rightValue));
      case "array:lengthEquals": return (l || []).length === Number(cond.rightValue);
      case "array:lengthNotEquals": return (l || []).length !== Number(cond.rightValue);
      case "array:lengthGt": return (l || []).length > Number(cond.rightValue);
      case "array:lengthLt": return (l || []).length < Number(cond.rightValue);
      case "array:lengthGte": return (l || []).length >= Number(cond.rightValue);
      case "array:lengthLte": return (l || []).length <= Number(cond.rightValue);
      default:
        throw new N8nError(`the condition operator ${type} \`${operation}\` is not supported`);
    }
  }

  function regex(r, ci) {
    const s = String(r ?? "");
    const m = /^\/(.*)\/([a-z]*)$/.exec(s);
    return m ? new RegExp(m[1], m[2] + (ci && !m[2].includes("i") ? "i" : "")) : new RegExp(s, ci ? "i" : "");
  }

  // An If/Filter/Switch `conditions` block (already resolved for the item).
  // What the block stores wins (n8n's editor writes the node's "Ignore Case"
  // and "Convert types" settings into it); a block without them takes the
  // node's.
  function holds(block, node) {
    const options = Object.assign({}, block.options || {});
    const nodeOptions = node.options || {};
    const loose = options.typeValidation !== undefined
      ? options.typeValidation === "loose"
      : node.looseTypeValidation === true || nodeOptions.looseTypeValidation === true;
    const caseSensitive = options.caseSensitive !== undefined
      ? options.caseSensitive !== false
      : nodeOptions.ignoreCase !== true;
    const list = block.conditions || [];
    const results = list.map((c) => test(c, { loose, caseSensitive }));
    return (block.combinator || "and") === "or" ? results.some(Boolean) : results.every(Boolean);
  }

  // ---- the nodes ----------------------------------------------------------
  const api = {};

  api.context = context;
  api.DateTime = DateTime;
  api.resolve = resolve;

  // A trigger's message as items: an array of objects is the items, an
  // object one item, nothing one empty item.
  api.trigger = (input, name) => {
    const raw = input === undefined || input === null ? [{}] : Array.isArray(input) ? input : [input];
    const items = raw.map((j) => ({
      json: isObject(j) && isObject(j.json) ? j.json : isObject(j) ? j : { data: j },
      paired: {},
    }));
    return new Context(items, {}, name, {}).done(items);
  };

  // A webhook request (Sluice's trigger.webhook message) as n8n's item.
  api.webhook = (input, name, url) => {
    const req = input || {};
    const item = {
      json: {
        headers: req.headers || {},
        params: {},
        query: req.query || {},
        body: req.body === undefined ? {} : req.body,
        webhookUrl: url,
        executionMode: "production",
      },
      paired: {},
    };
    return new Context([item], {}, name, {}).done([item]);
  };

  // The Schedule Trigger's item for a run at `iso` (UTC).
  api.schedule = (iso, name) => {
    const t = new DateTime(Date.parse(iso || new Date().toISOString()));
    const h = t.hour;
    const suffix = (d) => (d % 10 === 1 && d !== 11 ? "st" : d % 10 === 2 && d !== 12 ? "nd" : d % 10 === 3 && d !== 13 ? "rd" : "th");
    const clock = `${h % 12 || 12}:${pad(t.minute)}:${pad(t.second)} ${h < 12 ? "am" : "pm"}`;
    const json = {
      timestamp: t.toISO().replace(/\.\d{3}/, ".000"),
      "Readable date": `${MONTHS[t.month - 1]} ${t.day}${suffix(t.day)} ${t.year}, ${clock}`,
      "Readable time": clock,
      "Day of week": DAYS[t.d.getUTCDay()],
      Year: String(t.year),
      Month: MONTHS[t.month - 1],
      "Day of month": pad(t.day),
      Hour: pad(h),
      Minute: pad(t.minute),
      Second: pad(t.second),
      Timezone: "UTC (UTC+00:00)",
    };
    const item = { json, paired: {} };
    return new Context([item], {}, name, {}).done([item]);
  };

  api.noOp = (input) => {
    const c = context(input);
    return c.done(c.items.map((it, i) => c.out(clone(it.json), i)));
  };

  // Edit Fields (Set) v3.x; older `fields.values` too.
  api.set = (input, params) => {
    const c = context(input);
    const p = params || {};
    const dot = !(p.options && p.options.dotNotation === false);
    const out = c.items.map((it, i) => {
      const r = c.resolveFor(i, p);
      let json;
      const include = r.includeOtherFields === true || r.include === "all" ||
        (r.include === undefined && r.includeOtherFields === undefined && p.keepOnlySet === false);
      if (r.mode === "raw") {
        let obj = r.jsonOutput;
        if (typeof obj === "string") {
          try { obj = JSON.parse(obj); } catch (e) { throw new N8nError(`The 'JSON Output' in item ${i} is not valid JSON`); }
        }
        if (!isObject(obj)) throw new N8nError(`The 'JSON Output' in item ${i} does not contain a valid JSON object`);
        json = include ? Object.assign(clone(it.json), obj) : obj;
        return c.out(json, i);
      }
      json = include ? clone(it.json) : {};
      if (r.include === "selected" || r.include === "except") {
        const names = String(r.includeFields || r.excludeFields || "").split(",").map((s) => s.trim()).filter(Boolean);
        const base = {};
        if (r.include === "selected") names.forEach((n) => { const v = getPath(it.json, n, dot); if (v !== undefined) setPath(base, n, clone(v), dot); });
        else { Object.assign(base, clone(it.json)); names.forEach((n) => delete base[n]); }
        json = base;
      }
      const assignments = (r.assignments && r.assignments.assignments) || [];
      for (const a of assignments) {
        setPath(json, a.name, typed(a.type || "string", a.value, a.name, i, r.options || {}), dot);
      }
      const legacy = (r.fields && r.fields.values) || [];
      for (const f of legacy) {
        const type = (f.type || "stringValue").replace(/Value$/, "");
        const value = f[`${type}Value`] !== undefined ? f[`${type}Value`] : f.stringValue;
        setPath(json, f.name, typed(type, value, f.name, i, r.options || {}), dot);
      }
      // Set v1/v2: `values: {string: [{name, value}], number: [...], boolean: [...]}`.
      if (isObject(r.values)) {
        for (const [type, list] of Object.entries(r.values)) {
          for (const f of list || []) setPath(json, f.name, typed(type, f.value, f.name, i, r.options || {}), dot);
        }
      }
      return c.out(json, i);
    });
    return c.done(out);
  };

  function typed(type, v, name, i, options) {
    const fail = () => {
      if (options.ignoreConversionErrors) return v;
      throw new N8nError(`'${name}' expects a ${type} but we got '${toText(v)}' [item ${i}]`);
    };
    switch (type) {
      case "string": return v === undefined || v === null ? v : typeof v === "object" ? JSON.stringify(v) : String(v);
      case "number": {
        if (typeof v === "number") return v;
        if (v === "" || v === null || v === undefined) return v === "" ? fail() : v;
        const n = Number(v);
        return Number.isNaN(n) ? fail() : n;
      }
      case "boolean":
        if (typeof v === "boolean") return v;
        if (v === "true" || v === 1 || v === "1") return true;
        if (v === "false" || v === 0 || v === "0") return false;
        return fail();
      case "array":
        if (Array.isArray(v)) return v;
        if (typeof v === "string") { try { const a = JSON.parse(v); if (Array.isArray(a)) return a; } catch (e) {} }
        return fail();
      case "object":
        if (isObject(v)) return v;
        if (typeof v === "string") { try { const o = JSON.parse(v); if (isObject(o)) return o; } catch (e) {} }
        return fail();
      default:
        return v;
    }
  }

  // If v2: `{true: [...], false: [...]}`, a side with no items left out.
  api.if = (input, params) => {
    const c = context(input);
    const t = [];
    const f = [];
    c.items.forEach((it, i) => {
      const r = c.resolveFor(i, params || {});
      (holds(r.conditions || {}, r) ? t : f).push(c.out(clone(it.json), i));
    });
    return ports({ true: c.done(t), false: c.done(f) });
  };

  // Filter v2: the items that hold.
  api.filter = (input, params) => {
    const c = context(input);
    const kept = [];
    c.items.forEach((it, i) => {
      const r = c.resolveFor(i, params || {});
      if (holds(r.conditions || {}, r)) kept.push(c.out(clone(it.json), i));
    });
    return c.done(kept);
  };

  // Switch v3: `{"output0": [...], ..., "fallback": [...]}`.
  api.switch = (input, params) => {
    const c = context(input);
    const p = params || {};
    const rules = (p.rules && (p.rules.values || p.rules.rules)) || [];
    const n = p.mode === "expression" ? Number(p.numberOutputs || 4) : rules.length;
    const outs = Array.from({ length: n }, () => []);
    const fallback = [];
    c.items.forEach((it, i) => {
      const r = c.resolveFor(i, p);
      const options = r.options || {};
      if (p.mode === "expression") {
        const k = Number(r.output);
        if (!(k >= 0 && k < n)) throw new N8nError(`The output ${r.output} is not allowed. It has to be between 0 and ${n - 1}!`);
        outs[k].push(c.out(clone(it.json), i));
        return;
      }
      const ruleList = (r.rules && (r.rules.values || r.rules.rules)) || [];
      let matched = false;
      for (let k = 0; k < ruleList.length; k++) {
        if (holds(ruleList[k].conditions || {}, r)) {
          outs[k].push(c.out(clone(it.json), i));
          matched = true;
          if (!options.allMatchingOutputs) break;
        }
      }
      if (!matched) {
        const fb = options.fallbackOutput;
        if (fb === "extra") fallback.push(c.out(clone(it.json), i));
        else if (fb !== undefined && fb !== "none" && outs[Number(fb)]) outs[Number(fb)].push(c.out(clone(it.json), i));
      }
    });
    const res = {};
    outs.forEach((list, k) => { res[`output${k}`] = c.done(list); });
    res.fallback = c.done(fallback);
    return ports(res);
  };

  // A port object for `code.js` ports: a port with no items is left out
  // (skipped), as n8n does not run a node that gets no items.
  function ports(res) {
    const out = {};
    for (const [k, v] of Object.entries(res)) if (v.length > 0) out[k] = v;
    return out;
  }

  // Merge v2.1+/v3: `inputs` is one item list (or null) per input.
  api.merge = (inputs, params, name) => {
    const p = params || {};
    const lists = (inputs || []).map((l) => toItems(l));
    const c = new Context([], {}, name || "Merge", {});
    const mode = p.mode || "append";
    const options = p.options || {};
    const clash = (options.clashHandling && options.clashHandling.values) || {};
    const prefer = clash.resolveClash || "preferLast";
    const deep = (clash.mergeMode || "deepMerge") === "deepMerge";
    const join = (a, b) => {
      const [x, y] = prefer === "preferInput1" ? [b, a] : [a, b];
      if (prefer === "addSuffix") {
        const o = {};
        for (const [k, v] of Object.entries(a)) o[k in b ? `${k}_1` : k] = v;
        for (const [k, v] of Object.entries(b)) o[k in a ? `${k}_2` : k] = v;
        return o;
      }
      return deep ? deepMerge(clone(x), y) : Object.assign(clone(x), clone(y));
    };
    let out = [];
    const keep = (it) => ({ json: clone(it.json), paired: Object.assign({}, it.paired || {}) });
    if (mode === "append") {
      for (const l of lists) out.push(...l.map(keep));
    } else if (mode === "chooseBranch") {
      const which = p.output === "input2" ? 1 : 0;
      out = (lists[which] || []).map(keep);
    } else if (mode === "combine" || mode === "mergeByIndex" || mode === "mergeByKey" || mode === "multiplex") {
      const by = mode === "mergeByIndex" ? "combineByPosition" : mode === "multiplex" ? "combineAll" :
        mode === "mergeByKey" ? "combineByFields" : p.combineBy || p.combinationMode || "combineByFields";
      const [a, b] = [lists[0] || [], lists[1] || []];
      if (by === "combineByPosition" || by === "mergeByPosition") {
        const n = options.includeUnpaired ? Math.max(a.length, b.length) : Math.min(a.length, b.length);
        for (let i = 0; i < n; i++) {
          const x = a[i];
          const y = b[i];
          const json = x && y ? join(x.json, y.json) : clone((x || y).json);
          out.push({ json, paired: Object.assign({}, (y && y.paired) || {}, (x && x.paired) || {}) });
        }
      } else if (by === "combineAll") {
        for (const x of a) for (const y of b) out.push({ json: join(x.json, y.json), paired: Object.assign({}, x.paired || {}) });
      } else {
        const pairs = p.fieldsToMatchString !== undefined
          ? String(p.fieldsToMatchString).split(",").map((s) => s.trim()).filter(Boolean).map((f) => [f, f])
          : ((p.fieldsToMatch && p.fieldsToMatch.values) || []).map((v) => [v.field1, v.field2]);
        if (p.propertyName1) pairs.push([p.propertyName1, p.propertyName2]);
        const keyOf = (it, side) => JSON.stringify(pairs.map((pr) => getPath(it.json, pr[side])));
        const joinMode = p.joinMode || (mode === "mergeByKey" ? "enrichInput1" : "keepMatches");
        const outputFrom = p.outputDataFrom || "both";
        const bIndex = new Map();
        b.forEach((y) => { const k = keyOf(y, 1); if (!bIndex.has(k)) bIndex.set(k, []); bIndex.get(k).push(y); });
        const matchedB = new Set();
        const unmatchedA = [];
        for (const x of a) {
          const ys = bIndex.get(keyOf(x, 0)) || [];
          if (ys.length === 0) {
            unmatchedA.push(x);
            if (joinMode === "enrichInput1" || joinMode === "keepEverything") out.push(keep(x));
            continue;
          }
          for (const y of ys) {
            matchedB.add(y);
            if (joinMode === "keepNonMatches") continue;
            if (joinMode === "keepMatches" && outputFrom === "input1") out.push(keep(x));
            else if (joinMode === "keepMatches" && outputFrom === "input2") out.push(keep(y));
            else if (joinMode === "enrichInput2") continue;
            else out.push({ json: join(x.json, y.json), paired: Object.assign({}, x.paired || {}) });
          }
        }
        if (joinMode === "enrichInput2") {
          for (const y of b) {
            const xs = a.filter((x) => keyOf(x, 0) === keyOf(y, 1));
            if (xs.length === 0) out.push(keep(y));
            for (const x of xs) out.push({ json: join(x.json, y.json), paired: Object.assign({}, y.paired || {}) });
          }
        }
        if (joinMode === "keepNonMatches") {
          if (outputFrom !== "input2") out.push(...unmatchedA.map(keep));
          if (outputFrom !== "input1") out.push(...b.filter((y) => !matchedB.has(y)).map(keep));
        }
        if (joinMode === "keepEverything") out.push(...b.filter((y) => !matchedB.has(y)).map(keep));
      }
    } else {
      throw new N8nError(`Merge: the mode \`${mode}\` is not supported`);
    }
    return c.done(out);
  };

  function deepMerge(target, source) {
    for (const [k, v] of Object.entries(source || {})) {
      if (isObject(v) && isObject(target[k])) target[k] = deepMerge(target[k], v);
      else target[k] = clone(v);
    }
    return target;
  }

  // Code v2: `body` is the user's function, called with n8n's names.
  api.code = async (input, mode, body) => {
    const c = context(input);
    const norm = (v, i) => {
      if (isObject(v) && isObject(v.json)) return c.out(v.json, i, v.binary ? { binary: v.binary } : undefined);
      if (isObject(v)) return c.out(v, i);
      throw new N8nError(`Code doesn't return items properly: return an array of objects (item ${i})`);
    };
    if (mode === "runOnceForEachItem") {
      const out = [];
      for (let i = 0; i < c.items.length; i++) {
        const s = c.scope(i);
        const v = await body(s, c.items);
        if (v === undefined || v === null) continue;
        if (Array.isArray(v)) throw new N8nError(`Code doesn't return a single object [item ${i}]: return one object in "Run Once for Each Item" mode`);
        out.push(norm(v, i));
      }
      return c.done(out);
    }
    const s = c.scope(0);
    s.$json = c.items[0] ? c.items[0].json : {};
    const v = await body(s, c.items);
    if (v === undefined || v === null) return c.done([]);
    const list = Array.isArray(v) ? v : [v];
    return c.done(list.map((x, k) => {
      const o = norm(x, Math.min(k, Math.max(0, c.items.length - 1)));
      // n8n pairs an all-items result with the first item when lengths
      // differ, else position by position.
      if (c.items.length !== list.length) o.paired = Object.assign({}, (c.items[0] && c.items[0].paired) || {});
      return o;
    }));
  };

  // Split Out.
  api.splitOut = (input, params) => {
    const c = context(input);
    const out = [];
    c.items.forEach((it, i) => {
      const r = c.resolveFor(i, params || {});
      const opts = r.options || {};
      const dot = opts.disableDotNotation !== true;
      const fields = String(r.fieldToSplitOut || "").split(",").map((s) => s.trim()).filter(Boolean);
      if (fields.length === 0) throw new N8nError("Split Out: set the field to split out");
      const values = fields.map((f) => {
        const v = getPath(it.json, f, dot);
        if (v === undefined) throw new N8nError(`The field '${f}' wasn't found in item ${i}`);
        return Array.isArray(v) ? v : isObject(v) ? Object.values(v) : [v];
      });
      const n = Math.max(...values.map((v) => v.length));
      for (let k = 0; k < n; k++) {
        let json = {};
        if (r.include === "allOtherFields") {
          json = clone(it.json);
          fields.forEach((f) => delete json[f]);
        } else if (r.include === "selectedOtherFields") {
          String(r.fieldsToInclude || "").split(",").map((s) => s.trim()).filter(Boolean)
            .forEach((f) => { const v = getPath(it.json, f, dot); if (v !== undefined) setPath(json, f, clone(v), dot); });
        }
        fields.forEach((f, fi) => {
          const v = values[fi][k];
          const dest = opts.destinationFieldName || f;
          if (fields.length === 1 && isObject(v) && !opts.destinationFieldName && r.include !== "allOtherFields" && r.include !== "selectedOtherFields") {
            Object.assign(json, clone(v));
          } else if (v !== undefined) {
            json[dest] = clone(v);
          }
        });
        out.push(c.out(json, i));
      }
    });
    return c.done(out);
  };

  // Aggregate.
  api.aggregate = (input, params) => {
    const c = context(input);
    const p = params || {};
    const opts = p.options || {};
    if (p.aggregate === "aggregateAllItemData") {
      const dest = p.destinationFieldName || "data";
      const pick = (json) => {
        if (p.include === "specifiedFields") {
          const o = {};
          String(p.fieldsToInclude || "").split(",").map((s) => s.trim()).filter(Boolean).forEach((f) => { o[f] = json[f]; });
          return o;
        }
        if (p.include === "allFieldsExcept") {
          const o = clone(json);
          String(p.fieldsToExclude || "").split(",").map((s) => s.trim()).filter(Boolean).forEach((f) => delete o[f]);
          return o;
        }
        return clone(json);
      };
      return c.done([c.out({ [dest]: c.items.map((it) => pick(it.json)) }, 0)]);
    }
    const fields = (p.fieldsToAggregate && p.fieldsToAggregate.fieldToAggregate) || [];
    const json = {};
    const dot = opts.disableDotNotation !== true;
    for (const f of fields) {
      const name = f.fieldToAggregate;
      const dest = f.renameField ? f.outputFieldName : name;
      let values = c.items.map((it) => getPath(it.json, name, dot));
      if (!opts.keepMissing) values = values.filter((v) => v !== undefined && v !== null);
      if (opts.mergeLists) values = values.flatMap((v) => (Array.isArray(v) ? v : [v]));
      json[dest] = clone(values);
    }
    return c.done([c.out(json, 0)]);
  };

  // Respond to Webhook: what Sluice's output.respond sends, and the items
  // passed on.
  api.respond = (input, params) => {
    const c = context(input);
    const r = c.resolveFor(0, params || {});
    const opts = r.options || {};
    const headers = {};
    for (const h of (opts.responseHeaders && opts.responseHeaders.entries) || []) headers[h.name] = h.value;
    let body;
    switch (r.respondWith || "firstIncomingItem") {
      case "firstIncomingItem":
        body = c.items[0] ? c.items[0].json : {};
        if (opts.responseKey) body = { [opts.responseKey]: body };
        break;
      case "allIncomingItems":
        body = c.items.map((it) => it.json);
        if (opts.responseKey) body = { [opts.responseKey]: body };
        break;
      case "json":
        body = typeof r.responseBody === "string" ? JSON.parse(r.responseBody) : r.responseBody;
        break;
      case "text":
        body = toText(r.responseBody);
        if (!Object.keys(headers).some((k) => k.toLowerCase() === "content-type")) headers["content-type"] = "text/plain; charset=utf-8";
        break;
      case "noData":
        body = "";
        break;
      case "redirect":
        headers.location = r.redirectURL;
        return { respond: { status: opts.responseCode || 307, headers, body: "" }, out: c.done(c.items.map((it, i) => c.out(clone(it.json), i))) };
      default:
        throw new N8nError(`Respond to Webhook: responding with \`${r.respondWith}\` is not supported`);
    }
    return {
      respond: { status: Number(opts.responseCode || 200), headers, body },
      out: c.done(c.items.map((it, i) => c.out(clone(it.json), i))),
    };
  };

  // HTTP Request v3/v4: one request per item, for Sluice's http.request
  // (after a flow.split): `{method, url (query included), headers, body,
  // item}`.
  api.httpRequests = (input, params) => {
    const c = context(input);
    return c.items.map((it, i) => {
      const r = c.resolveFor(i, params || {});
      const pairs = (block) => {
        const o = {};
        for (const p of (block && block.parameters) || []) if (p.name !== undefined && p.name !== "") o[p.name] = p.value;
        return o;
      };
      const jsonOf = (v, what) => {
        if (typeof v !== "string") return v;
        try { return JSON.parse(v); } catch (e) { throw new N8nError(`${what} is not valid JSON [item ${i}]`); }
      };
      let url = String(r.url || "");
      if (r.sendQuery) {
        const q = r.specifyQuery === "json" ? jsonOf(r.jsonQuery, "JSON Query") : pairs(r.queryParameters);
        const qs = Object.entries(q || {}).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(toText(v))}`).join("&");
        if (qs) url += (url.includes("?") ? "&" : "?") + qs;
      }
      const headers = {};
      if (r.sendHeaders) {
        const h = r.specifyHeaders === "json" ? jsonOf(r.jsonHeaders, "JSON Headers") : pairs(r.headerParameters);
        for (const [k, v] of Object.entries(h || {})) headers[k] = toText(v);
      }
      let body = null;
      if (r.sendBody) {
        const type = r.contentType || "json";
        if (type === "json" || type === "form-urlencoded") {
          body = (r.specifyBody || "keypair") === "json" ? jsonOf(r.jsonBody, "JSON Body") : pairs(r.bodyParameters);
        } else if (type === "raw") {
          body = toText(r.body);
        } else {
          throw new N8nError(`HTTP Request: a ${type} body is not converted`);
        }
      }
      return { method: String(r.method || "GET").toUpperCase(), url, headers, body, item: it };
    });
  };

  // The responses (Sluice's http.request outputs, in request order) as
  // n8n's items: a JSON array answer is one item per element.
  api.httpResponses = (input, params, name) => {
    const requests = (input && input.requests) || [];
    const responses = (input && input.responses) || [];
    const c = new Context(requests.map((r) => r.item), {}, name || "HTTP Request", {});
    const opts = ((params || {}).options && params.options.response && params.options.response.response) || {};
    const out = [];
    responses.forEach((res, i) => {
      if (opts.fullResponse) {
        out.push(c.out({ body: res.body, headers: res.headers, statusCode: res.status, statusMessage: "" }, i));
        return;
      }
      const body = res.body;
      if (Array.isArray(body)) body.forEach((b) => out.push(c.out(isObject(b) ? b : { data: b }, i)));
      else if (isObject(body)) out.push(c.out(body, i));
      else out.push(c.out({ data: body === null || body === undefined ? "" : body }, i));
    });
    return c.done(out);
  };

  // Send Email v2.x: one message per item, for Sluice's email.send.
  api.emailRequests = (input, params) => {
    const c = context(input);
    return c.items.map((it, i) => {
      const r = c.resolveFor(i, params || {});
      const o = r.options || {};
      const format = r.emailFormat || (r.html !== undefined && r.text === undefined ? "html" : "text");
      const list = (v) => (v === undefined || v === null || v === "" ? null : toText(v));
      const m = { from: list(r.fromEmail), to: list(r.toEmail), cc: list(o.ccEmail), bcc: list(o.bccEmail),
        reply_to: list(o.replyTo), subject: toText(r.subject), text: null, html: null, item: it };
      if (format === "text" || format === "both") m.text = toText(r.text);
      if (format === "html" || format === "both") m.html = toText(r.html);
      if (m.text === null && m.html === null) m.text = "";
      return m;
    });
  };

  // email.send's results as n8n's items.
  api.emailResults = (input, name) => {
    const requests = (input && input.requests) || [];
    const results = (input && input.results) || [];
    const c = new Context(requests.map((r) => r.item), {}, name || "Send Email", {});
    return c.done(results.map((res, i) => c.out({
      accepted: res.accepted || [], rejected: [], response: res.response || "",
      envelope: { from: requests[i].from, to: res.accepted || [] }, messageId: res.message_id,
    }, i)));
  };

  // A sub-workflow's output (one value per exit, each a list of item JSON)
  // as items: the exit's, when there is one.
  api.subworkflowItems = (input, name) => {
    const out = (input && input.output) || {};
    const values = Object.values(out);
    const items = values.length === 1 && Array.isArray(values[0]) ? values[0] : values.length === 0 ? [] : [out];
    const c = new Context(toItems((input && input.items) || []), {}, name || "Execute Workflow", {});
    return c.done(items.map((j) => c.out(isObject(j) ? j : { data: j }, 0)));
  };

  // What a workflow gives: each item's json.
  api.json = (items) => toItems(items).map((it) => it.json);

  api.Error = N8nError;
  globalThis.n8n = Object.freeze(api);
})();
