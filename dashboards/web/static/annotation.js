// Tags and the note of a run or sweep, editable with a user token.
import {act} from './api.js';
import {h} from './dom.js';
import {fmtTime} from './format.js';

// Who changed the tags and the note, newest first, folded away: a removed tag says who had set
// it, a replaced note what it said.
function historyList(history) {
  if (!history.length) return h('span');
  const line = (e) => {
    const what = e.kind === 'note' ?
        `note: "${e.value}"` + (e.previous ? ` (was "${e.previous}")` : '') :
        e.kind === 'tag removed' ? `removed tag ${e.value} (set by ${e.previous})` :
                                   `added tag ${e.value}`;
    return h('li', {}, h('span', {class: 'muted', text: `${fmtTime(e.at_us)} ${e.who}: `}), what);
  };
  return h(
      'details', {id: 'annotation-history'},
      h('summary', {text: `history (${history.length} change${history.length > 1 ? 's' : ''})`}),
      h('ul', {}, history.slice().reverse().map(line)));
}

// The card for `path` ("runs/ID" or "sweeps/NAME"): each change is one POST to
// PATH/annotate, whose answer redraws the card.
export function annotationCard(path, annotation) {
  const card = h('div', {class: 'card annotation', id: 'annotation'});
  const change = async (body) => {
    const out = await act(path + '/annotate', null, body);
    if (out) draw(out);
  };
  const tagChip = (t) =>
      h('span', {class: 'tag', title: `set by ${t.who}, ${fmtTime(t.at_us)}`}, t.name,
        h('button', {
          class: 'tag-remove',
          title: 'remove tag ' + t.name,
          onclick: () => change({remove_tags: [t.name]}),
        },
          '×'));
  const draw = (a) => {
    const chips = a.tags.map(tagChip);
    const tagIn = h('input', {id: 'tag-add', placeholder: 'new tag', size: 14, maxlength: 64});
    const noteIn = h('textarea', {
      id: 'note-text',
      rows: 3,
      cols: 70,
      maxlength: 8192,
      placeholder: 'a note: what this is, why it failed, what to rerun',
    });
    noteIn.value = a.note.text;
    const who =
        a.note.who ? `last written by ${a.note.who}, ${fmtTime(a.note.at_us)}` : 'no note yet';
    const addTag = () => {
      const t = tagIn.value.trim();
      if (t) change({add_tags: [t]});
    };
    card.replaceChildren(
        h('div', {class: 'controls'}, h('label', {text: 'tags'}),
          h('span', {id: 'tags'}, chips.length ? chips : h('span', {class: 'muted', text: 'none'})),
          tagIn, h('button', {id: 'tag-add-button', onclick: addTag}, 'Add tag')),
        h('div', {}, h('label', {text: 'note'}),
          h('span', {class: 'muted', id: 'note-who', text: ' ' + who})),
        noteIn,
        h('div', {},
          h('button', {id: 'note-save', onclick: () => change({note: noteIn.value})},
            'Save note')),
        historyList(a.history || []));
  };
  draw(annotation);
  return card;
}
