// The token bar in the header: save or forget the user token the actions send.
import {forgetToken, saveToken, token} from './api.js';

// `cart up` prints the address with #token=…: keep the token, drop it from the address bar.
export function takeTokenFromAddress() {
  if (location.hash.startsWith('#token=')) {
    saveToken(decodeURIComponent(location.hash.slice(7)));
    history.replaceState(null, '', location.pathname + '#/');
  }
}

// Wires the form; `onSaved` runs after a new token is saved (the view redraws with it).
export function setupToken(onSaved) {
  const input = document.getElementById('token-input');
  const state = document.getElementById('token-state');
  const refresh = () => {
    state.textContent = token() ? 'token set' : 'no token';
  };
  document.getElementById('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (input.value) saveToken(input.value.trim());
    input.value = '';
    refresh();
    onSaved();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    forgetToken();
    refresh();
  });
  refresh();
}
