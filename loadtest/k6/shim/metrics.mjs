// k6/metrics: custom metrics that the summary and thresholds see.
import { add, metric } from './runtime.mjs';

class Custom {
  constructor(name, type) {
    if (!/^[A-Za-z0-9_]{1,128}$/.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}`);
    this.name = name;
    this.type = type;
    metric(name, type);
  }

  add(value, tags) {
    if (this.type === 'rate') value = value ? 1 : 0;
    add(this.name, this.type, value, tags);
  }
}

export class Counter extends Custom { constructor(name) { super(name, 'counter'); } }
export class Rate extends Custom { constructor(name) { super(name, 'rate'); } }
export class Trend extends Custom { constructor(name) { super(name, 'trend'); } }
export class Gauge extends Custom { constructor(name) { super(name, 'gauge'); } }
export default { Counter, Rate, Trend, Gauge };
