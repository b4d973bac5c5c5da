// k6/execution: where the running iteration is.
import { state } from './runtime.mjs';

const exec = {
  get vu() { return state.vu; },
  get scenario() { return state.scenario; },
  test: { abort(msg) { throw Object.assign(new Error(msg || 'test aborted'), { k6Abort: true }); } },
  instance: { get iterationsCompleted() { return state.completed; } },
};

export default exec;
export const { vu, scenario, test, instance } = exec;
