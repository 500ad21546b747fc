// The one notice line under the header: what went wrong, or what an action did.
const notice = document.getElementById('notice');

// Shows `message` (an error unless `ok`); an empty message hides the line.
export function show(message, ok) {
  notice.hidden = !message;
  notice.textContent = message || '';
  notice.className = ok ? 'notice ok' : 'notice';
}

// Shows an error; a 401 says that a token is wanted.
export function fail(e) {
  if (e && e.status === 401) {
    show('cartd needs a token: ' + e.message + '. Enter a user token above.');
  } else {
    show(String(e && e.message ? e.message : e));
  }
}
