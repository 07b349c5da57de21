// A sample multi-session conversation written for this demo (not taken from any dataset), so that a visitor sees
// recall work across sessions in seconds.
export const SAMPLE = [
  {
    session: "2024-03-02-garden",
    messages: [
      ["Maya", "I finally planted the raised bed behind the house: tomatoes, basil and two rows of snap peas.", "2024-03-02T10:05:00Z"],
      ["Assistant", "Lovely! Snap peas like cool weather, so March is a good time. Did you add compost?", "2024-03-02T10:06:00Z"],
      ["Maya", "Yes, from the community garden on Elm Street. My neighbour Tomás gave me his old trellis too.", "2024-03-02T10:08:00Z"],
      ["Assistant", "A trellis will help the peas climb. Remember to water the basil in the morning.", "2024-03-02T10:09:00Z"],
    ],
  },
  {
    session: "2024-04-14-marathon",
    messages: [
      ["Maya", "I signed up for the Lisbon half marathon in October. First race since my knee surgery!", "2024-04-14T18:30:00Z"],
      ["Assistant", "Congratulations! How is the knee holding up on longer runs?", "2024-04-14T18:31:00Z"],
      ["Maya", "Fine up to 12 km. My physio, Dr. Okafor, wants me to add strength work twice a week.", "2024-04-14T18:33:00Z"],
      ["Assistant", "Squats and step-ups are classics for that. Do you run with a club?", "2024-04-14T18:34:00Z"],
      ["Maya", "With the Riverside Runners on Sunday mornings, 8 am at the boathouse.", "2024-04-14T18:35:00Z"],
    ],
  },
  {
    session: "2024-05-20-cooking",
    messages: [
      ["Maya", "I tried making pão de queijo for my sister's birthday; they came out flat.", "2024-05-20T20:10:00Z"],
      ["Assistant", "That often means the dough was too warm or had too much milk. Which flour did you use?", "2024-05-20T20:11:00Z"],
      ["Maya", "Sweet tapioca starch. Next time I'll try the sour one, polvilho azedo.", "2024-05-20T20:13:00Z"],
      ["Assistant", "Sour starch gives more rise. Your sister will get a second batch!", "2024-05-20T20:14:00Z"],
    ],
  },
  {
    session: "2024-06-08-work",
    messages: [
      ["Maya", "Big news: I'm moving from the data team to lead the accessibility audit at work.", "2024-06-08T09:00:00Z"],
      ["Assistant", "That's a great step. When does the new role start?", "2024-06-08T09:01:00Z"],
      ["Maya", "On July 1st. My manager Priya said I can hire one more person.", "2024-06-08T09:02:00Z"],
    ],
  },
];

export const SAMPLE_QUESTIONS = [
  "Who is Maya's physio?",
  "What did Maya plant in the raised bed?",
  "Which starch should Maya try for the cheese bread?",
  "When does the new job start?",
];
