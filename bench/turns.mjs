// Realistic chat turns for the embedding benchmark, generated from hand-written templates (no dataset text is
// committed). Lengths vary the way chat does: many short replies, some medium turns, a few long ones — which is
// exactly where padding to the longest text of a batch costs. Deterministic for a seed.

const SHORT = [
  "ok thanks!", "haha yes", "sounds good to me", "wait, really?", "no worries", "see you tomorrow then",
  "I love that", "sure, why not", "that's so sweet of you", "good luck with the exam!", "omg congrats",
  "not sure yet", "can you remind me later?", "yes please", "nope, not this time",
];
const PEOPLE = ["my sister", "Maya", "my boss", "the kids", "Jon", "my physio", "our neighbour", "Grandma", "my roommate"];
const PLACES = ["Lisbon", "the glacier lake", "the farmers market", "Kyoto", "the new climbing gym", "my parents' place",
  "the library", "that ramen bar downtown", "the coast", "the dentist"];
const THINGS = ["sourdough starter", "marathon training plan", "tomato seedlings", "guitar lessons", "tax return",
  "wedding speech", "knee exercises", "vegan lasagna recipe", "job interview", "pottery class", "budget spreadsheet"];
const FEELINGS = ["exhausted", "really proud", "a bit nervous", "so relieved", "annoyed", "excited", "homesick"];
const WHEN = ["yesterday", "last weekend", "this morning", "on Tuesday", "two weeks ago", "last summer", "tonight"];
const MEDIUM = [
  "I went to {place} with {person} {when} and honestly it was {feeling} afterwards.",
  "{person} finally helped me with the {thing}, we spent the whole afternoon on it.",
  "Do you remember what I said about the {thing}? I think I need to start over.",
  "I'm {feeling} because the {thing} is due {when} and I haven't even started.",
  "Can you suggest something fun to do in {place} for a day with {person}?",
  "What should I bring when I visit {place}? {person} says it gets cold in the evening.",
  "We booked the trip to {place}! Leaving {when}, I can't believe it's happening.",
  "My {thing} is going better than expected, {person} even asked me to show them how.",
];
const LONG = [
  "So here's the thing: {person} called me {when} and asked whether I could take over the {thing} while they are " +
    "away, and I said yes before thinking it through. Now I have to juggle that, my own deadline at work, and the " +
    "trip to {place} we planned months ago. I'm {feeling}. How would you prioritise this if you were me?",
  "Quick update on the {thing}: I followed your advice from last time, cut the plan into smaller steps and did one " +
    "every evening after dinner. It worked for about a week, then {person} got sick and everything fell apart. " +
    "I still went to {place} {when} though, which helped me clear my head a little.",
  "I keep thinking about what happened at {place}. {person} said something that really hurt, and I didn't answer " +
    "because I was {feeling} and didn't want to make a scene. Should I bring it up again or just let it go? " +
    "We have known each other for ten years and I don't want one evening to ruin that.",
];

function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >> 17;
    s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
}

/** `n` chat turns as `{ speaker, content }`, alternating user/assistant: ~40% short, ~45% medium, ~15% long. */
export function chatTurns(n, seed = 7) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const fill = (t) => t.replace(/\{(\w+)\}/g, (_, k) =>
    pick({ person: PEOPLE, place: PLACES, thing: THINGS, feeling: FEELINGS, when: WHEN }[k]));
  const out = [];
  for (let i = 0; i < n; i++) {
    const x = r();
    const content = x < 0.4 ? pick(SHORT) : x < 0.85 ? fill(pick(MEDIUM)) : fill(pick(LONG));
    out.push({ speaker: i % 2 ? "assistant" : "user", content });
  }
  return out;
}

/** Questions a user might ask of their memory, for the recall latency runs. */
export function questions(n, seed = 11) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const forms = [
    "What did I say about the {thing}?", "When did I go to {place}?", "Who helped me with the {thing}?",
    "How was the trip to {place} with {person}?", "Why was I {feeling} {when}?", "What does {person} think of {place}?",
  ];
  return Array.from({ length: n }, () => pick(forms).replace(/\{(\w+)\}/g, (_, k) =>
    pick({ person: PEOPLE, place: PLACES, thing: THINGS, feeling: FEELINGS, when: WHEN }[k])));
}
