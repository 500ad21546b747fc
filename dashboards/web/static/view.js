// What a view must stop when it is left: timers and live streams, collected in a Scope while
// the view draws. Views take their scope as an argument rather than sharing one list, so a
// timer that starts after an `await` lands in the scope of the view (or tab) that started it.
import {h} from './dom.js';
import {fail} from './notice.js';

export class Scope {
  constructor() {
    this.stops = [];
    this.left = false;
  }
  // Runs `fn` when the scope is left; at once if it already was (a draw that finished late).
  onLeave(fn) {
    if (this.left) {
      fn();
    } else {
      this.stops.push(fn);
    }
  }
  leave() {
    this.left = true;
    const stops = this.stops;
    this.stops = [];
    stops.forEach((f) => f());
  }
  // A scope that is left with this one or before it (a tab inside a page).
  child() {
    const c = new Scope();
    this.onLeave(() => c.leave());
    return c;
  }
}

// Draws a view now and again every `ms` until the scope is left.
export async function drawAndRefresh(scope, draw, ms, onError) {
  await draw();
  const timer = setInterval(() => draw().catch(onError || fail), ms);
  scope.onLeave(() => clearInterval(timer));
}

// A page of a heading and one card, which `fill(card)` redraws every `ms` until the scope is left.
export async function refreshedCard(main, scope, title, ms, fill) {
  const card = h('div', {class: 'card'});
  main.append(h('h1', {text: title}), card);
  await drawAndRefresh(scope, () => fill(card), ms);
}
