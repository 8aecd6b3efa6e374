/** The package's version, as its package.json says (a test checks they agree). */
export const VERSION = '0.1.0';
