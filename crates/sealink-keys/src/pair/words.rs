//! The pairing code's word list: 256 short, distinct, sorted English words, so two words carry
//! 16 bits and a word is found by binary search.

/// Sorted; `tests::word_list_is_sorted_and_distinct` checks it.
pub const WORDS: [&str; 256] = [
    "acid", "acorn", "actor", "adobe", "agent", "alarm", "album", "alien", "alpha", "amber",
    "angle", "ankle", "apple", "april", "arena", "armor", "arrow", "atlas", "attic", "audio",
    "autumn", "bacon", "badge", "bagel", "baker", "bamboo", "banana", "banjo", "barley", "basil",
    "basket", "beach", "beaver", "berry", "bicycle", "bishop", "blanket", "blossom", "bonus",
    "border", "bottle", "bracket", "breeze", "bridge", "bronze", "bubble", "bucket", "buffalo",
    "button", "cabin", "cactus", "camera", "candle", "canoe", "canyon", "carbon", "carpet",
    "castle", "cedar", "cello", "cement", "cherry", "chess", "circle", "citrus", "clover",
    "cobalt", "coffee", "comet", "copper", "coral", "cotton", "cousin", "coyote", "crater",
    "crayon", "cricket", "crystal", "curtain", "dagger", "daisy", "dancer", "delta", "denim",
    "desert", "diesel", "dinner", "doctor", "dolphin", "domino", "donkey", "dragon", "drawer",
    "eagle", "echo", "eclipse", "elbow", "ember", "engine", "fabric", "falcon", "feather",
    "fender", "ferry", "fiddle", "finger", "flute", "forest", "fossil", "fridge", "galaxy",
    "garden", "garlic", "gecko", "ginger", "glacier", "globe", "gopher", "granite", "gravel",
    "guitar", "hammer", "harbor", "harvest", "hazel", "helmet", "hermit", "honey", "hornet",
    "iceberg", "igloo", "indigo", "island", "ivory", "jacket", "jaguar", "jasmine", "jelly",
    "jigsaw", "jungle", "kayak", "kettle", "kitten", "koala", "ladder", "lagoon", "lantern",
    "lemon", "lentil", "lettuce", "lizard", "lobster", "locket", "lotus", "magnet", "mango",
    "maple", "marble", "meadow", "melon", "mirror", "mitten", "monkey", "mosaic", "muffin",
    "museum", "napkin", "nectar", "needle", "nickel", "noodle", "nutmeg", "oasis", "ocean",
    "octopus", "olive", "onion", "orange", "orbit", "orchid", "otter", "oyster", "paddle", "panda",
    "panther", "papaya", "parrot", "pebble", "pepper", "piano", "pickle", "pigeon", "pillow",
    "pirate", "planet", "plum", "pocket", "pony", "potato", "pretzel", "puffin", "pumpkin",
    "puzzle", "quartz", "quill", "rabbit", "radar", "radish", "raven", "ribbon", "rocket",
    "saddle", "salmon", "sandal", "satin", "scarf", "seagull", "shadow", "silver", "sketch",
    "spider", "sponge", "squash", "stable", "statue", "sunset", "tablet", "tango", "teapot",
    "temple", "thunder", "tiger", "timber", "tomato", "tornado", "trumpet", "tulip", "tunnel",
    "turnip", "turtle", "unicorn", "valley", "velvet", "violin", "volcano", "waffle", "walnut",
    "walrus", "whistle", "willow", "window", "winter", "wizard", "yogurt", "zebra", "zipper",
];
